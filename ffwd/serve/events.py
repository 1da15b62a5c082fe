"""What a generation tells the HTTP layer, independent of the wire format.

The service turns engine tokens into these events on the worker thread; the
app formats them as one JSON response or as SSE chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ffwd.templates.formats.base import ContentDelta


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """The first delta of a call carries `id` and `name`; later ones only arguments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallOut:
    id: str
    name: str
    arguments: str  # JSON text

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id, "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    def as_openai(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token: str
    bytes: tuple[int, ...]
    logprob: float

    def as_openai(self) -> dict[str, Any]:
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.bytes)}


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One emitted token's log-probability (sampled or injected) and the top alternatives.

    Sent just before the text the token produced, so it rides with that text's delta.
    """

    token: str
    bytes: tuple[int, ...]
    logprob: float
    top: tuple[TopLogprob, ...] = ()

    def as_openai(self) -> dict[str, Any]:
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.bytes),
                "top_logprobs": [t.as_openai() for t in self.top]}


@dataclass(frozen=True, slots=True)
class Finished:
    """The last event: the whole message, why it ended, and what it cost."""

    finish_reason: str  # stop | length | tool_calls | cancelled (the client is gone)
    content: str | None
    tool_calls: tuple[ToolCallOut, ...]
    usage: Usage
    ffwd: dict[str, Any] = field(default_factory=dict)


Event = ContentDelta | ToolCallDelta | TokenLogprob | Finished

__all__ = [
    "ContentDelta", "Event", "Finished", "TokenLogprob", "ToolCallDelta", "ToolCallOut",
    "TopLogprob", "Usage",
]
