"""CISC's and self-certainty's math under a public name, for the harness's offline re-scoring.

The math lives in :mod:`strategies._certainty` (the live ``cisc`` and ``self_certainty``
strategies use it there); ``evals.analysis.bank`` imports it from here, so recorded samples are
re-scored with the very functions the live strategies vote with.
"""

from __future__ import annotations

from strategies._certainty import best_scored, borda_vote, cisc_vote, self_certainty, sequence_probability

__all__ = ["best_scored", "borda_vote", "cisc_vote", "self_certainty", "sequence_probability"]
