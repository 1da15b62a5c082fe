"""What OpenAI's Chat Completions and Completions share: the request's common fields,
and the writer of their chunked replies.

Both APIs stream ``data:`` chunks in one envelope (id, object, created,
model), one chunk per delta of a token's text, then a finish chunk, the usage
when asked (``stream_options.include_usage``) and ``[DONE]``. `ChunkWriter`
does all of that; each API's writer (`chat.ChatWriter`,
`completions.CompletionWriter`) says only how a choice and its
log-probabilities look. A token's log-probability waits in `pending` until
the next chunk leaves, so each chunk carries the tokens that produced its
text.

A request with ``"ffwd": {"tokens": true}`` also gets those tokens as they
came: each chunk's ``ffwd.tokens`` (and a whole response's ``ffwd.tokens``)
lists the ids since the previous chunk with their origin, own text, where
their text went and, when asked, their log-probability (`token_entry`).
OpenAI clients ignore the field.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from typing import Any

from ffwd.engine.events import GenerationResult, TokenEvent
from ffwd.engine.sample.sampling import SamplingParams
from ffwd.serve.dialects.common import capped
from ffwd.serve.dialects.completions_models import CompletionRequest
from ffwd.serve.errors import APIError
from ffwd.serve.protocol import ChatCompletionRequest
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import ContentDelta, Delta, ReasoningDelta, ToolCallDelta

DONE = "data: [DONE]\n\n"


def common_fields(req: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
    """The `GenerationRequest` fields both APIs spell alike."""
    rf = req.response_format.model_dump(by_alias=True) if req.response_format else None
    return {
        "sampling": SamplingParams(
            temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
            repetition_penalty=req.repetition_penalty, presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty, logit_bias=req.logit_bias_ids,
            seed=req.seed),
        "stop": tuple(req.stop_list), "response_format": rf,
        "fill": req.ffwd.fill_overrides() if req.ffwd else None,
        "logprobs": req.logprob_count, "stream": req.stream, "max_tokens": req.token_limit,
    }


class ChunkWriter(ABC):
    """One response of either API (see the module docstring). A subclass names its
    objects and writes its choices: `opening`, `delta_chunk`, `stream_choice`,
    `whole_choice` and `choice_logprobs`."""

    chunk_object = ""  # the `object` of a stream chunk
    whole_object = ""  # the `object` of a whole response

    def __init__(self, gen: GenerationRequest, *, tokens: bool = False,
                 include_usage: bool = False) -> None:
        self.id = gen.id
        self.model = gen.context.model
        self.logprobs = gen.logprobs is not None
        self.tokens = tokens  # ``"ffwd": {"tokens": true}``
        self.include_usage = include_usage
        self.created = int(time.time())
        self.pending: list[TokenEvent] = []  # tokens not sent yet (logprobs, token view)

    # --- the subclass's part --------------------------------------------------------
    @abstractmethod
    def opening(self) -> list[str]:
        """The SSE events before the first token."""

    @abstractmethod
    def delta_chunk(self, d: Delta) -> str:
        """The chunk of one delta of a token's text."""

    @abstractmethod
    def stream_choice(self, part: Any, lp: dict[str, Any] | None,
                      finish: str | None) -> dict[str, Any]:
        """A chunk's choice made of `part` (None: the finish chunk's)."""

    @abstractmethod
    def whole_choice(self, res: GenerationResult, lp: dict[str, Any] | None) -> dict[str, Any]:
        """A whole response's choice."""

    @abstractmethod
    def choice_logprobs(self, items: list[TokenEvent]) -> dict[str, Any] | None:
        """The log-probabilities of `items` as a choice carries them (None: not asked)."""

    # --- whole responses ------------------------------------------------------------
    def collect(self, event: TokenEvent) -> None:
        """An event of a whole response: its token kept for the logprobs and entries."""
        if event.result is None and (self.logprobs or self.tokens):
            self.pending.append(event)

    def whole(self, res: GenerationResult) -> dict[str, Any]:
        block = res.ffwd_block()
        if self.tokens:
            block["tokens"] = [token_entry(t, self.logprobs) for t in self.pending]
        choice = self.whole_choice(res, self.choice_logprobs(self.pending))
        return {"id": self.id, "object": self.whole_object, "created": self.created,
                "model": self.model, "choices": [choice], "usage": usage(res), "ffwd": block}

    # --- streams --------------------------------------------------------------------
    def event(self, event: TokenEvent) -> list[str]:
        """The chunks of one event: one per delta (its logprobs ride on the first); the
        last event's then end the stream: the finish, the usage when asked, [DONE]."""
        self.collect(event)
        out = [self.delta_chunk(d) for d in event.deltas]
        res = event.result
        if res is None:
            return out
        out.append(self.chunk(None, finish=res.finish_reason))
        if self.include_usage:
            out.append(self.line(choices=[], usage=usage(res), ffwd=res.ffwd_block()))
        return [*out, DONE]

    def error_event(self, err: APIError) -> str:
        """A failure after the stream began: OpenAI's error object, then [DONE]."""
        return f"data: {json.dumps(err.body())}\n\n" + DONE

    def line(self, **fields: Any) -> str:
        """One SSE event: the stream's common envelope plus `fields`."""
        body = {"id": self.id, "object": self.chunk_object, "created": self.created,
                "model": self.model, **fields}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def chunk(self, part: Any, finish: str | None = None, with_logprobs: bool = True) -> str:
        """A chunk with one choice made of `part`, carrying the pending tokens."""
        sent, self.pending = (self.pending, []) if with_logprobs else ([], self.pending)
        choice = self.stream_choice(part, self.choice_logprobs(sent) if sent else None, finish)
        if not self.tokens:
            return self.line(choices=[choice])
        entries = [token_entry(t, self.logprobs) for t in sent]
        return self.line(choices=[choice], ffwd={"tokens": entries})


def token_entry(t: TokenEvent, logprob: bool) -> dict[str, Any]:
    """One token of the ``ffwd.tokens`` view: its id, origin and own text; ``part``
    ``content``, ``reasoning`` or ``call`` (with the call's index) when its text came out
    as content, reasoning or a tool call, absent when it released nothing (markup the
    parser took, or text held back until a later token); its log-probability when the
    request asked."""
    out: dict[str, Any] = {"id": t.id, "origin": t.origin, "text": t.token}
    if t.deltas:
        last = t.deltas[-1]
        out["part"] = ("content" if isinstance(last, ContentDelta) else
                       "reasoning" if isinstance(last, ReasoningDelta) else "call")
        if isinstance(last, ToolCallDelta):
            out["call"] = last.index
    if logprob:
        out["logprob"] = finite(t.logprob)
    return out


def usage(res: GenerationResult) -> dict[str, Any]:
    """OpenAI's usage: the output ids that wrote reasoning are counted among the
    completion's (``completion_tokens_details.reasoning_tokens``), as OpenAI counts them."""
    return {
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "total_tokens": res.prompt_tokens + res.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": res.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": res.reasoning_tokens},
    } | capped(res)


def token_logprob(t: TokenEvent) -> dict[str, Any]:
    """A token's log-probability entry as Chat Completions and Responses write it."""
    return {"token": t.token, "logprob": finite(t.logprob), "bytes": list(t.raw),
            "top_logprobs": [{"token": a.token, "logprob": finite(a.logprob),
                              "bytes": list(a.raw)} for a in t.top]}


def finite(x: float | None) -> float:
    """JSON has no -Infinity: an impossible token reports -9999 (as OpenAI does)."""
    return -9999.0 if x is None or x <= -9999.0 else x
