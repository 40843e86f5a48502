"""A reward model served by ``vllm serve --runner pooling``, rated over its ``/pooling`` endpoint.

    scorer = VLLMServerScorer("http://127.0.0.1:8000/v1")          # a PRM, the only model served
    scorer = VLLMServerScorer("http://host:8000", kind="orm", model="my-orm")

Each call POSTs the chat (:func:`prm_messages`, or the question and answer for an ORM) as
``{"model", "messages", "add_generation_prompt": false}``: vLLM renders it with the model's chat
template and pools it (docs/scorers.md has the serve command and both answers' shapes). Prompt
tokens come from the answer's ``usage`` (``count_source="server"``). ``open()`` asks
``/v1/models`` for the model and rates one probe, so a wrong URL, a generative model or a
step_tag_id that is not the tag's fails there with one line. Leaving ``score()`` by cancellation
closes the HTTP request; vLLM then aborts it.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from paragen.scoring.base import DEFAULT_STEP_TAG, ScoreRequest, ScorerError, StepScores
from paragen.scoring.pooled import ORM_SERVE_HINT, PRM_SERVE_HINT, PooledRewardModel

_URL_HINT = "give the base URL of `vllm serve`, e.g. vllm-server:http://127.0.0.1:8000/v1"
_PROBE = ScoreRequest(question="What is 1 + 1?", steps=("1 + 1 = 2.",))


class VLLMServerScorer(PooledRewardModel):
    """A PRM (default) or ORM behind a vLLM server; ``target`` is its base URL, with or without /v1."""

    def __init__(
        self,
        target: str,
        *,
        model: str | None = None,
        step_tag: str = DEFAULT_STEP_TAG,
        kind: str = "prm",
        api_key_env: str | None = None,
        timeout: float | str = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,  # tests inject faults here
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError("transport is not a spec option")  # a test's hook, not a string
        self.root = target.rstrip("/").removesuffix("/v1")
        super().__init__(kind, step_tag)
        self.model = model
        self.name = f"vllm-server:{self.root}"
        key = os.environ.get(api_key_env) if api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(
            base_url=self.root, headers=headers, timeout=float(timeout), transport=transport
        )
        self._opened = False

    async def open(self) -> None:
        """Find the model and rate a probe: misconfigurations fail here, once, not at every step."""
        if self._opened:
            return
        self.model = self._pick_model(await self._request("GET", "/v1/models"))
        await self.score(_PROBE)
        self._opened = True

    async def score(self, request: ScoreRequest) -> StepScores:
        messages = self._messages(request)
        body = {"model": self.model, "messages": messages, "add_generation_prompt": False}
        if self._kind == "orm":
            body["use_activation"] = False  # the raw reward, as the model's head gives it
        answer = await self._request("POST", "/pooling", json=body)
        data = _first_item(answer)
        miscounted = self._kind == "prm" and isinstance(data, list) and len(data) != len(request.steps)
        steps = self._steps(data, len(request.steps), await self._tag_id() if miscounted else None)
        prompt_tokens = _prompt_tokens(answer)
        source = "server" if prompt_tokens is not None else "none"
        return StepScores(steps=steps, prompt_tokens=prompt_tokens or 0, count_source=source)

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def _hint(self) -> str:
        return PRM_SERVE_HINT if self._kind == "prm" else ORM_SERVE_HINT

    def _pick_model(self, listing: Any) -> str:
        data = listing.get("data") if isinstance(listing, dict) else None
        served = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else None
        if served is None:
            raise ScorerError(f"{self.root} is not a vLLM server: /v1/models lists no models")
        if self.model is not None:
            if self.model not in served:
                raise ScorerError(f"{self.root} does not serve {self.model!r}", hint=f"it serves {served}")
            return self.model
        if len(served) != 1:
            raise ScorerError(f"{self.root} serves {len(served)} models", hint="name one with ?model=NAME")
        return str(served[0])

    async def _tag_id(self) -> int | None:
        """The step tag's token id as the server tokenizes it, for the hint of a wrong step_tag_id."""
        try:
            answer = await self._request(
                "POST",
                "/tokenize",
                json={"model": self.model, "prompt": self.step_tag, "add_special_tokens": False},
            )
        except ScorerError:
            return None
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        return (
            tokens[0]
            if isinstance(tokens, list) and len(tokens) == 1 and isinstance(tokens[0], int)
            else None
        )

    async def _request(self, method: str, path: str, json: dict[str, Any] | None = None) -> Any:
        """The JSON answer of ``method path``; every failure is one ScorerError line."""
        where = f"{self.root}{path}"
        try:
            response = await self._client.request(method, path, json=json)
        except httpx.TimeoutException as exc:
            raise ScorerError(f"vLLM at {where} did not answer in time ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise ScorerError(f"cannot reach vLLM at {where}: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404 and path in ("/pooling", "/v1/models"):
            if path == "/pooling":
                raise ScorerError(
                    f"{self.root} serves no pooling model (POST /pooling: 404)", hint=self._hint
                )
            raise ScorerError(f"{self.root} is not a vLLM server (GET /v1/models: 404)", hint=_URL_HINT)
        if response.status_code >= 400:
            raise ScorerError(f"vLLM at {where} answered {response.status_code}: {_error_text(response)}")
        try:
            return response.json()
        except ValueError as exc:
            raise ScorerError(
                f"vLLM at {where} answered something that is not JSON: {response.text[:80]!r}"
            ) from exc


def _first_item(answer: Any) -> object:
    """``data[0].data`` of a /pooling answer: one item, as paragen sends one chat."""
    items = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0], dict):
        raise ScorerError(f"vLLM's /pooling answer has no single item: {str(answer)[:120]!r}")
    return items[0].get("data")


def _prompt_tokens(answer: Any) -> int | None:
    usage = answer.get("usage")
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return count if isinstance(count, int) else None


def _error_text(response: httpx.Response) -> str:
    """vLLM's own message (``{"error": {"message": ...}}``), else the start of the body, on one line."""
    try:
        error = response.json().get("error")
        text = str(error.get("message")) if isinstance(error, dict) else response.text
    except (ValueError, AttributeError):
        text = response.text
    return " ".join(text.split())[:300] or response.reason_phrase
