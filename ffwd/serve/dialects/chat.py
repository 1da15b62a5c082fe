"""OpenAI Chat Completions and Completions: requests in, JSON bodies and SSE chunks out.

`chat_request` / `text_request` translate a validated body
(`ffwd.serve.protocol`) into a `GenerationRequest`. `ChatReply` knows the
request's kind (``chat`` or ``text``), id and options, and turns the
generation's events into OpenAI JSON: each `TokenEvent`'s deltas become chunks
(content, or tool-call fragments with the call's id on its first), and the
`GenerationResult` the finish (with the deltas held back until the end) and
the usage. Log-probabilities wait in `pending` until the next chunk leaves,
so each chunk carries the tokens that produced its text.

A request with ``"ffwd": {"tokens": true}`` also gets those tokens as they
came: each chunk's ``ffwd.tokens`` (and a whole response's ``ffwd.tokens``)
lists the ids since the previous chunk with their origin, own text, where
their text went and, when asked, their log-probability (`token_entry`).
OpenAI clients ignore the field.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ffwd.engine.events import TokenEvent
from ffwd.engine.generate import GenerationResult
from ffwd.engine.sampling import SamplingParams
from ffwd.serve.errors import APIError
from ffwd.serve.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import ContentDelta, Delta, ToolCallDelta

DONE = "data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def sampling(req: SamplingFields) -> SamplingParams:
    """The sampling settings OpenAI's fields give."""
    return SamplingParams(
        temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
        repetition_penalty=req.repetition_penalty, presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty, logit_bias=req.logit_bias_ids, seed=req.seed,
    )


def _common(req: ChatCompletionRequest | CompletionRequest, reply_id: str) -> dict[str, Any]:
    rf = req.response_format.model_dump(by_alias=True) if req.response_format else None
    return {
        "sampling": sampling(req), "stop": tuple(req.stop_list), "response_format": rf,
        "fill": req.ffwd.fill_overrides() if req.ffwd else None,
        "logprobs": req.logprob_count, "stream": req.stream,
    }


def chat_request(req: ChatCompletionRequest, reply_id: str) -> GenerationRequest:
    limit = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    return GenerationRequest(
        reply_id, "chat", messages=[m.as_template_message() for m in req.messages],
        tools=list(req.tools or []), tool_choice=req.tool_choice_value,
        parallel_tool_calls=req.parallel_tool_calls, max_tokens=req.token_limit,
        params={"max_tokens": limit}, **_common(req, reply_id),
    )


def parse_chat(body: dict[str, Any]) -> GenerationRequest:
    """A chat request body, validated and translated (the bench and tools build prompts so)."""
    req = ChatCompletionRequest.model_validate(body)
    req.check()
    return chat_request(req, new_id("chatcmpl-"))


def text_request(req: CompletionRequest, reply_id: str) -> GenerationRequest:
    return GenerationRequest(
        reply_id, "text", prompt=req.prompt_text, max_tokens=req.token_limit,
        **_common(req, reply_id),
    )


class ChatReply:
    """One response's state: its id, the call ids it gave, the tokens not yet sent.

    `tokens` lists each chunk's tokens (``"ffwd": {"tokens": true}``).
    """

    def __init__(self, kind: str, model: str, *, logprobs: bool = False, echo: str = "",
                 include_usage: bool = False, tokens: bool = False) -> None:
        self.kind = kind
        self.model = model
        self.logprobs = logprobs
        self.tokens = tokens
        self.include_usage = include_usage  # stream_options.include_usage
        self.echo = echo  # completions with echo: the prompt, sent before the completion
        self.id = new_id("chatcmpl-" if kind == "chat" else "cmpl-")
        self.created = int(time.time())
        self.pending: list[TokenEvent] = []  # tokens not sent yet (logprobs, token view)
        self.call_ids: dict[int, str] = {}
        self._offset = len(echo)  # text_offset of the next token (completions)

    # --- whole responses ----------------------------------------------------
    def collect(self, event: TokenEvent) -> None:
        """A token of a whole (not streamed) response: kept for its logprobs and entry."""
        if self.logprobs or self.tokens:
            self.pending.append(event)

    def whole(self, res: GenerationResult) -> dict[str, Any]:
        lp = self._logprobs(self.pending)
        block = res.ffwd_block()
        if self.tokens:
            block["tokens"] = [token_entry(t, self.logprobs) for t in self.pending]
        if self.kind == "chat":
            message: dict[str, Any] = {
                "role": "assistant", "content": res.content if res.content or not res.calls
                else None}
            if res.calls:
                message["tool_calls"] = [
                    {"id": self._call_id(i), "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for i, c in enumerate(res.calls)]
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": lp,
                                      "finish_reason": res.finish_reason}
        else:
            choice = {"index": 0, "text": self.echo + res.content, "logprobs": lp,
                      "finish_reason": res.finish_reason}
        return {
            "id": self.id, "object": "chat.completion" if self.kind == "chat" else
            "text_completion", "created": self.created, "model": self.model,
            "choices": [choice], "usage": usage(res), "ffwd": block,
        }

    # --- stream chunks --------------------------------------------------------
    def opening(self) -> list[str]:
        """The first chunk: the assistant role (chat), or the echoed prompt (text)."""
        if self.kind == "chat":
            return [self._chunk({"role": "assistant", "content": ""}, with_logprobs=False)]
        return [self._chunk(None, text=self.echo, with_logprobs=False)] if self.echo else []

    def event(self, event: TokenEvent) -> list[str]:
        """The chunks of one token: one per delta (its logprobs ride on the first)."""
        if self.logprobs or self.tokens:
            self.pending.append(event)
        return [self._delta(d) for d in event.deltas]

    def closing(self, res: GenerationResult) -> list[str]:
        """What was held back, the finish, the usage when asked, and [DONE]."""
        out = [self._delta(d) for d in res.tail]
        out.append(self._chunk({}, finish=res.finish_reason))
        if self.include_usage:
            out.append(self.event_line(choices=[], usage=usage(res), ffwd=res.ffwd_block()))
        return [*out, DONE]

    def error_event(self, err: APIError) -> str:
        """A failure after the stream began: OpenAI's error object, then [DONE]."""
        return f"data: {json.dumps(err.body())}\n\n" + DONE

    def event_line(self, **fields: Any) -> str:
        """One SSE event: the stream's common envelope plus `fields`."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        body = {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                **fields}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def _delta(self, d: Delta) -> str:
        if isinstance(d, ContentDelta):
            return self._chunk({"content": d.text}, text=d.text)
        return self._chunk({"tool_calls": [self._tool_delta(d)]})

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None,
               text: str | None = None, with_logprobs: bool = True) -> str:
        sent, self.pending = (self.pending, []) if with_logprobs else ([], self.pending)
        lp = self._logprobs(sent) if sent else None
        if self.kind == "chat":
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": lp,
                                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
        if not self.tokens:
            return self.event_line(choices=[choice])
        entries = [token_entry(t, self.logprobs) for t in sent]
        return self.event_line(choices=[choice], ffwd={"tokens": entries})

    def _call_id(self, index: int) -> str:
        if index not in self.call_ids:
            self.call_ids[index] = new_id("call_")
        return self.call_ids[index]

    def _tool_delta(self, d: ToolCallDelta) -> dict[str, Any]:
        out: dict[str, Any] = {"index": d.index}
        fn: dict[str, Any] = {"arguments": d.arguments}
        if d.index not in self.call_ids:  # the call's first delta: its id, type and name
            out["id"], out["type"] = self._call_id(d.index), "function"
            fn["name"] = d.name or ""
        out["function"] = fn
        return out

    # --- log-probabilities ----------------------------------------------------
    def _logprobs(self, items: list[TokenEvent]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        if self.kind == "chat":
            return {"content": [_token_logprob(t) for t in items], "refusal": None}
        offsets = []
        for t in items:
            offsets.append(self._offset)
            self._offset += len(t.token)
        return {
            "tokens": [t.token for t in items],
            "token_logprobs": [_finite(t.logprob) for t in items],
            "top_logprobs": [{t.token: _finite(t.logprob)} | {a.token: _finite(a.logprob)
                                                              for a in t.top} for t in items],
            "text_offset": offsets,
        }


# Each live reply by its id, so that translating its request can switch its token view on.


def token_entry(t: TokenEvent, logprob: bool) -> dict[str, Any]:
    """One token of the ``ffwd.tokens`` view: its id, origin and own text; ``part``
    ``content`` or ``call`` (with the call's index) when its text came out as content or
    as a tool call, absent when it released nothing (markup the parser took, or text
    held back until a later token); its log-probability when the request asked."""
    out: dict[str, Any] = {"id": t.id, "origin": t.origin, "text": t.token}
    if t.deltas:
        last = t.deltas[-1]
        out["part"] = "content" if isinstance(last, ContentDelta) else "call"
        if isinstance(last, ToolCallDelta):
            out["call"] = last.index
    if logprob:
        out["logprob"] = _finite(t.logprob)
    return out


def usage(res: GenerationResult) -> dict[str, Any]:
    return {
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "total_tokens": res.prompt_tokens + res.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": res.cached_tokens},
    }


def _token_logprob(t: TokenEvent) -> dict[str, Any]:
    return {"token": t.token, "logprob": _finite(t.logprob), "bytes": list(t.raw),
            "top_logprobs": [{"token": a.token, "logprob": _finite(a.logprob),
                              "bytes": list(a.raw)} for a in t.top]}


def _finite(x: float | None) -> float:
    """JSON has no -Infinity: an impossible token reports -9999 (as OpenAI does)."""
    return -9999.0 if x is None or x <= -9999.0 else x
