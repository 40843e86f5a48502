"""DeepConf's confidence math under a public name, for the harness's offline re-scoring.

The math lives in :mod:`strategies._confidence` (the live strategies use it there); the harness
imports it from here, so that ``evals.analysis.bank`` scores recorded samples with the very
functions the live ``deepconf`` strategy votes with.
"""

from __future__ import annotations

from strategies._confidence import confident_vote, token_confidences, trace_confidence, trace_score

__all__ = ["confident_vote", "token_confidences", "trace_confidence", "trace_score"]
