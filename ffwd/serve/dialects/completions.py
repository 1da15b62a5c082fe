"""OpenAI Completions (``POST /v1/completions``): a prompt in, text and chunks out.

`open_completion` translates a validated body (`ffwd.serve.protocol`) into a
`GenerationRequest` (its prompt text, or the token ids the client sent) and
makes the writer of its response. `CompletionWriter`
writes each event's text as a chunk's choice, after the prompt when the
request asks for ``echo``; the envelope, finish, usage and token view are
`chunks.ChunkWriter`'s.
"""

from __future__ import annotations

from typing import Any

from ffwd.engine.events import GenerationResult, TokenEvent
from ffwd.serve.dialects.chunks import ChunkWriter, common_fields, finite
from ffwd.serve.dialects.common import new_id
from ffwd.serve.dialects.completions_models import CompletionRequest
from ffwd.serve.request import Context, GenerationRequest
from ffwd.templates.formats.base import ContentDelta, Delta


def open_completion(req: CompletionRequest,
                    context: Context | None = None) -> tuple[GenerationRequest, CompletionWriter]:
    """The generation a validated body asks for, and the writer of its response."""
    req.check()
    gen = GenerationRequest(new_id("cmpl-"), "text", prompt=req.prompt_text,
                            prompt_ids=req.prompt_ids, context=context or Context(),
                            **common_fields(req))
    writer = CompletionWriter(gen, echo=req.prompt_text if req.echo else "",
                              tokens=bool(req.ffwd and req.ffwd.tokens),
                              include_usage=req.include_usage)
    return gen, writer


class CompletionWriter(ChunkWriter):
    """One text completion: its text choices and where the next token's text starts."""

    chunk_object = whole_object = "text_completion"

    def __init__(self, gen: GenerationRequest, *, echo: str = "", tokens: bool = False,
                 include_usage: bool = False) -> None:
        super().__init__(gen, tokens=tokens, include_usage=include_usage)
        self.echo = echo  # the prompt, sent before the completion (``echo``)
        self._offset = len(echo)  # text_offset of the next token

    def opening(self) -> list[str]:
        """The echoed prompt, when asked for."""
        return [self.chunk(self.echo, with_logprobs=False)] if self.echo else []

    def delta_chunk(self, d: Delta) -> str:
        return self.chunk(d.text if isinstance(d, ContentDelta) else "")

    def stream_choice(self, part: Any, lp: dict[str, Any] | None,
                      finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": part or "", "logprobs": lp, "finish_reason": finish}

    def whole_choice(self, res: GenerationResult, lp: dict[str, Any] | None) -> dict[str, Any]:
        return {"index": 0, "text": self.echo + res.content, "logprobs": lp,
                "finish_reason": res.finish_reason}

    def choice_logprobs(self, items: list[TokenEvent]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        offsets = []
        for t in items:
            offsets.append(self._offset)
            self._offset += len(t.token)
        return {
            "tokens": [t.token for t in items],
            "token_logprobs": [finite(t.logprob) for t in items],
            "top_logprobs": [{t.token: finite(t.logprob)} | {a.token: finite(a.logprob)
                                                             for a in t.top} for t in items],
            "text_offset": offsets,
        }
