"""What vLLM's pooling runner returns for a reward model, read as :class:`StepScores` values.

Shared by ``vllm-server:`` (the ``/pooling`` endpoint's JSON) and ``vllm:`` (AsyncLLM.encode's
tensor, as a list): both are the same pooler output.

- A PRM (``*ForProcessRewardModel``, STEP pooling) gives one row per step tag in the prompt,
  each the softmax of the two classes; the step's score is P(class 1), the "positive" one.
- An ORM gives one value: a sequence classifier with one label (``classify``: ``[r]``) or a
  per-token reward model such as ``Qwen2ForRewardModel`` (ALL pooling: one ``[r]`` row per
  token, the reward is the last token's).
"""

from __future__ import annotations

from paragen.errors import ConfigError
from paragen.scoring.base import ScoreRequest, ScorerError, ScorerKind, reward_messages

PRM_SERVE_HINT = "serve a *ForProcessRewardModel with --runner pooling"
ORM_SERVE_HINT = (
    "serve a one-label reward model (e.g. *ForSequenceClassification, num_labels=1) with --runner pooling"
)


def step_tag_hint(step_tag: str, tag_id: int | None) -> str:
    """How to make vLLM pool at ``step_tag``: its STEP pooler reads the tag's token id from its
    pooler config, which defaults to Qwen2.5-Math-PRM's ``<extra_0>`` (151651)."""
    shown = str(tag_id) if tag_id is not None else "ID"
    flag = f"--pooler-config '{{\"step_tag_id\": {shown}}}'"
    return f"the PRM's step_tag_id must be the token id of {step_tag!r}: {flag}"


def prm_scores(data: object, num_steps: int, step_tag: str, tag_id: int | None = None) -> tuple[float, ...]:
    """P(positive) of each step from a STEP pooler's rows ``[[p_neg, p_pos], ...]``."""
    if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
        raise ScorerError("vLLM returned one value for the whole chat, not one per step", hint=PRM_SERVE_HINT)
    if len(data) != num_steps:
        raise ScorerError(
            f"vLLM returned {len(data)} step scores for {num_steps} step(s)",
            hint=step_tag_hint(step_tag, tag_id),
        )
    if any(len(row) != 2 for row in data):
        # With returned_token_ids vLLM keeps some columns before its activation, which then is a
        # sigmoid of one logit, not the two-class softmax the PRM was trained with.
        raise ScorerError(
            f"vLLM returned rows of {len(data[0])} values per step, not the two classes' probabilities",
            hint="serve without returned_token_ids in --pooler-config",
        )
    return tuple(_number(row[1]) for row in data)


def orm_score(data: object) -> float:
    """The reward of a one-label sequence classifier (``[r]``) or of a per-token reward model's
    last token (``[[r], ..., [r]]``)."""
    if isinstance(data, list) and data and isinstance(data[-1], list):
        data = data[-1]  # one row per token: the reward of the whole answer is at its end
    if not isinstance(data, list) or len(data) != 1:
        size = len(data) if isinstance(data, list) else "no"
        raise ScorerError(
            f"vLLM returned {size} values where an outcome reward model gives one",
            hint=ORM_SERVE_HINT,
        )
    return _number(data[0])


def check_kind(kind: str) -> ScorerKind:
    if kind not in ("prm", "orm"):
        raise ConfigError(f"scorer kind must be prm or orm, got {kind!r}", hint="?kind=prm or ?kind=orm")
    return "prm" if kind == "prm" else "orm"


class PooledRewardModel:
    """What the two vLLM scorers share: a kind (PRM or ORM), a step tag, the chat the model rates
    and how the pooler's output becomes step scores."""

    def __init__(self, kind: str, step_tag: str) -> None:
        self._kind = check_kind(kind)
        self.step_tag = step_tag

    @property
    def kind(self) -> ScorerKind:
        return self._kind

    def _messages(self, request: ScoreRequest) -> list[dict[str, str]]:
        return reward_messages(request, self._kind, self.step_tag)

    def _steps(self, data: object, num_steps: int, tag_id: int | None = None) -> tuple[float, ...]:
        if self._kind == "orm":
            return (orm_score(data),)
        return prm_scores(data, num_steps, self.step_tag, tag_id)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScorerError(f"vLLM returned {value!r} where a score belongs")
    return float(value)
