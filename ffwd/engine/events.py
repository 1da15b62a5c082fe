"""The one event type a generation streams, from the decode loop to the wire.

`TokenEvent` is one emitted id, sampled or injected. The decode loop
(`ffwd.engine.core.decode`) fills in what it knows: the id, its origin and, when asked,
the model's own log-probability of it and the best alternatives. The text
layer (`ffwd.engine.core.generate`) adds the token's own text and bytes, the output
text it released and what the tool-call parser made of that text (`deltas`:
content and call fragments).

The last event of a stream carries the finish, as mlx-lm's last
``GenerationResponse`` does: it is no token of its own (`id` is `END`), its
deltas are what was held back until the end, and its `result` is the whole
generation (`GenerationResult`). Every other event has no result. The
first event also carries what the prefill read (`PromptRead`: the prompt's
ids and how many came from the cache), so that a stream can report the
prompt's usage before its first token (Anthropic's ``message_start``). The
server's dialect modules only translate these events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ffwd.config import OutputCap
from ffwd.fill import FillStats, ProposalOrigin
from ffwd.templates.formats.base import Delta, ToolCall

TokenOrigin = Literal["sampled", ProposalOrigin]
# stop: the model ended (EOS) or a stop string matched; tool_calls: it ended with calls
# (or reached the calls it may make); length: max_tokens; cancelled: the client left.
FinishReason = Literal["stop", "length", "tool_calls", "cancelled"]
END = -1  # the id of a stream's last event, which is no token


@dataclass(frozen=True, slots=True)
class Alternative:
    """One of the most likely ids at a position, with its log-probability."""

    id: int
    logprob: float
    token: str = ""  # the id's own text (an incomplete character as U+FFFD)
    raw: bytes = b""  # its exact bytes


@dataclass(frozen=True, slots=True)
class PromptRead:
    """The prompt as the prefill read it: `tokens` ids, of which `cached` came from the
    cache (the rest were computed)."""

    tokens: int
    cached: int


@dataclass(slots=True)
class GenerationResult:
    """The whole generation, on the last event of a stream.

    `content`, `reasoning` and `calls` are the join of the deltas the events carried, the
    last one's included, so they are exactly what a streaming client
    assembled. `stop_sequence` is the stop string that ended the text, if one
    did. `cap` says that the server lowered the request's output limit (set by
    the server once the run has ended: the engine knows only the bound).
    """

    text: str
    token_ids: list[int]  # emitted ids, EOS excluded
    origins: list[TokenOrigin]
    finish_reason: FinishReason
    stats: FillStats
    forward_calls: int  # prefill chunks included
    prompt_tokens: int
    cached_tokens: int  # prompt ids reused from the backend's cache
    seconds: float
    prefill_seconds: float
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""  # the join of the reasoning deltas
    reasoning_tokens: int = 0  # emitted ids that wrote reasoning (its markup included)
    stop_sequence: str | None = None
    dropped_calls: int = 0  # calls that repeated an earlier one (dropped; the run stopped)
    fill: str = "off"  # the fill mode that ran
    grammar: bool = False  # whether a grammar constrained the output
    replica: str | None = None  # the replica that ran it (scale-out)
    cap: OutputCap | None = None  # the request's max_tokens, lowered by the server

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)

    def as_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "finish_reason": self.finish_reason,
            "stats": self.stats.as_dict(),
            "forward_calls": self.forward_calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 4),
            "prefill_seconds": round(self.prefill_seconds, 4),
        }

    def ffwd_block(self) -> dict[str, Any]:
        """What every API response reports in its ``ffwd`` object."""
        injected: dict[str, int] = {}
        for origin in self.origins:
            if origin != "sampled":
                injected[origin] = injected.get(origin, 0) + 1
        block = {
            "fill": self.fill, "grammar": self.grammar, "stats": self.stats.as_dict(),
            "forward_calls": self.forward_calls, "injected_by_origin": injected,
            "dropped_calls": self.dropped_calls,
            "seconds": round(self.seconds, 4), "prefill_seconds": round(self.prefill_seconds, 4),
        }
        return block if self.replica is None else {**block, "replica": self.replica}


@dataclass(slots=True)
class TokenEvent:
    """One emitted id, or the end of the stream (see the module docstring). The loop
    makes it and the text layer fills in its text (`ffwd.engine.sample.text.OutputText.feed`):
    one object per id, never changed once it has left the engine.

    `logprob` is the model's own log-probability of `id` (raw logits, before any
    sampling setting), None when the request did not ask; `top` the best ids at
    that position, most likely first. `token`/`raw` are the id's own text and
    bytes; `text` is the output text this event released (a stop string or an
    incomplete character may hold text back for later ids), and `deltas` that
    text as content and tool-call fragments. `result` is set on the last event
    only, `prompt` on the first and on the last.
    """

    id: int
    origin: TokenOrigin
    logprob: float | None = None
    top: tuple[Alternative, ...] = ()
    token: str = ""
    raw: bytes = b""
    text: str = ""
    deltas: tuple[Delta, ...] = ()
    result: GenerationResult | None = None
    prompt: PromptRead | None = None

    @staticmethod
    def last(result: GenerationResult, text: str = "",
             deltas: tuple[Delta, ...] = ()) -> TokenEvent:
        """The stream's last event: what was held back until the end, and the result."""
        return TokenEvent(END, "sampled", text=text, deltas=deltas, result=result,
                          prompt=PromptRead(result.prompt_tokens, result.cached_tokens))
