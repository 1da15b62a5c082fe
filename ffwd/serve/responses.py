"""Response bodies: a whole chat or text completion, and the SSE chunks of a stream.

`Reply` knows the request's kind (``chat`` or ``text``), id and options, and
turns the service's events into OpenAI JSON. Log-probabilities wait in
`Reply.pending` until the next delta leaves, so each chunk carries the
tokens that produced its text; the rest go out with the final chunk.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ffwd.serve.events import Finished, TokenLogprob, ToolCallDelta


class Reply:
    def __init__(self, kind: str, model: str, *, logprobs: bool = False, echo: str = "") -> None:
        self.kind = kind
        self.model = model
        self.logprobs = logprobs
        self.echo = echo  # completions with echo: the prompt, sent before the completion
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.pending: list[TokenLogprob] = []
        self._offset = len(echo)  # text_offset of the next token (completions)

    # --- whole responses ----------------------------------------------------
    def whole(self, fin: Finished) -> dict[str, Any]:
        lp = self._logprobs(self.pending)
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": fin.content}
            if fin.tool_calls:
                message["tool_calls"] = [c.as_openai() for c in fin.tool_calls]
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": lp,
                                      "finish_reason": fin.finish_reason}
        else:
            choice = {"index": 0, "text": self.echo + (fin.content or ""), "logprobs": lp,
                      "finish_reason": fin.finish_reason}
        return {
            "id": self.id, "object": "chat.completion" if self.kind == "chat" else
            "text_completion", "created": self.created, "model": self.model,
            "choices": [choice], "usage": fin.usage.as_openai(), "ffwd": fin.ffwd,
        }

    # --- stream chunks --------------------------------------------------------
    def opening(self) -> str | None:
        """The first chunk: the assistant role (chat), or the echoed prompt (text)."""
        if self.kind == "chat":
            return self._chunk({"role": "assistant", "content": ""}, with_logprobs=False)
        return self._chunk(None, text=self.echo, with_logprobs=False) if self.echo else None

    def content(self, text: str) -> str:
        return self._chunk({"content": text}, text=text)

    def tool_call(self, d: ToolCallDelta) -> str:
        return self._chunk({"tool_calls": [_tool_delta(d)]})

    def finish(self, reason: str) -> str:
        return self._chunk({}, finish=reason)

    def usage(self, fin: Finished) -> str:
        return self.event(choices=[], usage=fin.usage.as_openai(), ffwd=fin.ffwd)

    def event(self, **fields: Any) -> str:
        """One SSE event: the stream's common envelope plus `fields`."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        body = {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                **fields}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None,
               text: str | None = None, with_logprobs: bool = True) -> str:
        lp = self._logprobs(self.pending) if with_logprobs and self.pending else None
        if with_logprobs:
            self.pending = []
        if self.kind == "chat":
            choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": lp,
                                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
        return self.event(choices=[choice])

    # --- log-probabilities ----------------------------------------------------
    def _logprobs(self, items: list[TokenLogprob]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        if self.kind == "chat":
            return {"content": [t.as_openai() for t in items], "refusal": None}
        offsets = []
        for t in items:
            offsets.append(self._offset)
            self._offset += len(t.token)
        return {
            "tokens": [t.token for t in items],
            "token_logprobs": [t.logprob for t in items],
            "top_logprobs": [{t.token: t.logprob} | {a.token: a.logprob for a in t.top}
                             for t in items],
            "text_offset": offsets,
        }


def _tool_delta(d: ToolCallDelta) -> dict[str, Any]:
    out: dict[str, Any] = {"index": d.index}
    if d.id is not None:
        out["id"] = d.id
        out["type"] = "function"
    fn: dict[str, Any] = {"arguments": d.arguments}
    if d.name is not None:
        fn["name"] = d.name
    out["function"] = fn
    return out
