"""The one event a generation sends, from the decode loop to the wire.

`TokenEvent` is one emitted id, sampled or injected. The decode loop
(`ffwd.engine.loop`) fills in what it knows: the id, its origin and, when asked,
the model's own log-probability of it and the best alternatives. The text
layer (`ffwd.engine.generate`) adds the token's own text and bytes, the output
text it released and what the tool-call parser made of that text (`deltas`:
content and call fragments). The server's dialect modules only translate these
events; the last item of a stream is the joined `GenerationResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ffwd.templates.formats.base import Delta

TokenOrigin = Literal[
    "sampled", "template", "schema", "grammar", "echo", "recall", "ngram", "mtp"]
# stop: the model ended (EOS) or a stop string matched; tool_calls: it ended with calls
# (or reached the calls it may make); length: max_tokens; cancelled: the client left.
FinishReason = Literal["stop", "length", "tool_calls", "cancelled"]
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "tool_calls", "cancelled")


@dataclass(frozen=True, slots=True)
class Alternative:
    """One of the most likely ids at a position, with its log-probability."""

    id: int
    logprob: float
    token: str = ""  # the id's own text (an incomplete character as U+FFFD)
    raw: bytes = b""  # its exact bytes


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One emitted id (see the module docstring).

    `logprob` is the model's own log-probability of `id` (raw logits, before any
    sampling setting), None when the request did not ask; `top` the best ids at
    that position, most likely first. `token`/`raw` are the id's own text and
    bytes; `text` is the output text this id released (a stop string or an
    incomplete character may hold text back for later ids), and `deltas` that
    text as content and tool-call fragments.
    """

    id: int
    origin: TokenOrigin
    logprob: float | None = None
    top: tuple[Alternative, ...] = ()
    token: str = ""
    raw: bytes = b""
    text: str = ""
    deltas: tuple[Delta, ...] = ()
