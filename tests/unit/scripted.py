"""Events a scripted service emits, as the engine's text layer would send them
(a plain module for the HTTP-layer tests, which run no model)."""

from __future__ import annotations

from ffwd.engine.events import Alternative, FinishReason, TokenEvent
from ffwd.engine.generate import GenerationResult
from ffwd.fill import FillStats
from ffwd.templates.formats.base import ContentDelta, ToolCall, ToolCallDelta


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
           prompt: int = 10, completion: int = 2, cached: int = 0,
           forward_calls: int = 0) -> GenerationResult:
    """The last item of a run."""
    return GenerationResult(
        text=content, token_ids=[0] * completion, origins=["sampled"] * completion,
        finish_reason=finish, stats=FillStats(), forward_calls=forward_calls,
        prompt_tokens=prompt, cached_tokens=cached, seconds=0.0, prefill_seconds=0.0,
        content=content, calls=list(calls),
    )
