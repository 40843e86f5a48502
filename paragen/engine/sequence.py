"""One sequence (one sample of one request) and its state."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

from paragen.engine.detokenizer import Detokenizer
from paragen.engine.thinking import ThinkingBudget

_seq_ids = itertools.count()


class SeqStatus(enum.Enum):
    WAITING = enum.auto()  # needs a prefill (new, or preempted and recomputed)
    FORKING = enum.auto()  # a sibling of a waiting sequence; gets the prompt's cache from it
    RUNNING = enum.auto()
    FINISHED = enum.auto()


@dataclass(slots=True)
class SeqParams:
    """Per-sequence sampling settings, resolved from the request (seed is already per sample)."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    ignore_eos: bool = False


@dataclass(slots=True)
class Sequence:
    token_ids: list[int]
    num_prompt_tokens: int
    params: SeqParams
    detok: Detokenizer
    seq_id: int = field(default_factory=lambda: next(_seq_ids))
    status: SeqStatus = SeqStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0  # tokens whose K/V are in the cache
    forks: list[Sequence] = field(default_factory=list)  # siblings that will share this prompt
    finish_reason: str | None = None
    fork_of: int | None = None  # a running sequence whose cache this one starts from (a probe)
    num_reused_tokens: int = 0  # tokens taken from that cache instead of prefilled
    thinking: ThinkingBudget | None = None  # where the request has a thinking budget
    stalled: bool = False  # its reader is behind (streams.py): decode steps pass it by, its cache stays

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status == SeqStatus.FINISHED

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]
