"""FFS with a known loser, for the tests that a first-finish cancel reaches a real server."""

from __future__ import annotations

from paragen import Problem, RunContext
from paragen.types import GenerateRequest
from strategies._toolkit import solve_request
from strategies.ffs import FFS

WINNER_TOKENS = 4


class UnevenFFS(FFS):
    """FFS over two samples of one problem: one capped at WINNER_TOKENS (so it finishes first), one
    that may run ``loser_tokens`` (the test's sampling bans or ignores its end-of-text): only the
    cancel can stop it early."""

    name = "uneven_ffs"
    loser_tokens = 400

    def _requests(self, ctx: RunContext, problem: Problem) -> list[GenerateRequest]:
        return [
            solve_request(ctx, problem.question, max_tokens=WINNER_TOKENS),
            solve_request(ctx, problem.question, max_tokens=self.loser_tokens),
        ]
