"""Events a scripted service emits, as the engine's text layer would send them, and
what such a service declares besides its script (for the HTTP-layer tests, which run
no model)."""

from __future__ import annotations

from typing import Any

from ffwd.engine.batch import BatchStats
from ffwd.engine.events import (
    Alternative,
    FinishReason,
    GenerationResult,
    TokenEvent,
    TokenOrigin,
)
from ffwd.fill import FillStats
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import ContentDelta, Delta, ToolCall, ToolCallDelta


def text(piece: str, logprob: float | None = None, top: tuple[Alternative, ...] = (),
         released: str | None = None) -> TokenEvent:
    """One token whose text is `piece`, released as content (with held-back text before
    it, when `released` says so)."""
    out = piece if released is None else released
    deltas = (ContentDelta(out),) if out else ()
    return TokenEvent(0, "sampled", logprob, top, piece, piece.encode(), out, deltas)


def held(piece: str, logprob: float | None = None,
         top: tuple[Alternative, ...] = ()) -> TokenEvent:
    """One token whose text is held back (it rides with a later token's delta)."""
    return TokenEvent(0, "sampled", logprob, top, piece, piece.encode())


def call(index: int, name: str | None = None, arguments: str = "") -> TokenEvent:
    """One token that writes a tool call's fragment (its name on the first)."""
    return TokenEvent(0, "sampled", text=arguments, deltas=(ToolCallDelta(index, name, arguments),))


def result(content: str = "", calls: tuple[ToolCall, ...] = (), finish: FinishReason = "stop",
           prompt: int = 10, completion: int = 2, cached: int = 0, forward_calls: int = 0,
           tail: tuple[Delta, ...] = (), stop_sequence: str | None = None,
           injected: int = 0) -> TokenEvent:
    """The last event of a run: what was held back until the end (`tail`), the result
    (its first `injected` ids fast-forwarded from the template)."""
    origins: list[TokenOrigin] = ["template"] * injected + ["sampled"] * (completion - injected)
    res = GenerationResult(
        text=content, token_ids=[0] * completion, origins=origins,
        finish_reason=finish, stats=FillStats(), forward_calls=forward_calls,
        prompt_tokens=prompt, cached_tokens=cached, seconds=0.0, prefill_seconds=0.0,
        content=content, calls=list(calls), stop_sequence=stop_sequence,
    )
    return TokenEvent.last(res, deltas=tail)


class ScriptedModel:
    """What a scripted service declares besides `prepare` and `run` (the rest of
    `ffwd.serve.execute.Service`), for a model that is not there."""

    model_id = "tiny"
    forward_calls = 0
    parallel = 1

    def batch_stats(self) -> BatchStats:
        return BatchStats()

    def model_info(self) -> dict[str, Any]:
        return {"context_window": 2048, "tool_format": "hermes", "grammar": False,
                "constrained_tool_calls": False}

    def count_tokens(self, req: GenerationRequest) -> int:
        """One per word of the messages' text, one per tool."""
        return sum(len(str(m.get("content", "")).split()) for m in req.messages) + len(req.tools)

    def reset(self) -> None:
        pass
