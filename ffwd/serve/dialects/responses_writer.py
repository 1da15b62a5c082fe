"""The writer of one OpenAI Responses reply: the whole response object, or its event stream.

`ResponsesWriter` turns the generation's deltas, through `segments.Segmenter`,
into output items in the order the model wrote them: a ``reasoning`` item
(``content`` one ``reasoning_text`` part, ``summary`` empty: ffwd writes no
summaries) for a run of reasoning, a ``message`` item for a run of text, a
``function_call`` item per call. The stream sends, per item,
``response.output_item.added``, its content part's ``added``, its text as
``response.reasoning_text.delta`` / ``response.output_text.delta`` (a call's
arguments as ``response.function_call_arguments.delta``), their ``done``
events and ``response.output_item.done``, between ``response.created`` /
``response.in_progress`` and ``response.completed`` (or ``incomplete``). Both
forms come from the same steps. A finished response is kept in the store
with the conversation it ends, the reply as an assistant turn (its reasoning as
``reasoning_content``), for ``previous_response_id``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ffwd.engine.events import GenerationResult, TokenEvent
from ffwd.serve.dialects.chunks import token_logprob
from ffwd.serve.dialects.common import capped, new_id
from ffwd.serve.dialects.responses_models import FunctionTool, ResponsesRequest
from ffwd.serve.dialects.segments import Segment, Segmenter, Step
from ffwd.serve.dialects.store import ResponseStore
from ffwd.serve.errors import APIError
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import ContentDelta

Steps = list[tuple[Step, list[dict[str, Any]]]]
ID_PREFIXES = {"reasoning": "rs_", "text": "msg_", "call": "fc_"}
TEXT_EVENTS = {"reasoning": "reasoning_text", "text": "output_text"}  # response.<name>.delta


@dataclass(frozen=True)
class Translated:
    gen: GenerationRequest
    conversation: list[dict[str, Any]]  # history and input, as messages (no instructions)
    warnings: list[str]  # what was skipped, for the response's `warnings`


class ResponsesWriter:
    """One response's state: its output items so far, their ids, its event count."""

    def __init__(self, req: ResponsesRequest, t: Translated,
                 store: ResponseStore | None = None) -> None:
        self.req, self.gen, self.warnings = req, t.gen, t.warnings
        self.conversation = t.conversation
        self.store = store
        self.id = t.gen.id
        self.created_at = int(time.time())
        self.segments = Segmenter()
        self.seq = 0
        self.ids: dict[int, tuple[str, str]] = {}  # position -> (item id, call id)
        self.pending: list[TokenEvent] = []  # tokens whose logprobs are not sent yet
        self.logprobs: dict[int, list[dict[str, Any]]] = {}  # position -> its text's

    # --- the Writer protocol ---------------------------------------------------
    def collect(self, event: TokenEvent) -> None:
        self._steps(event)

    def whole(self, res: GenerationResult) -> dict[str, Any]:
        return self._finish(res)

    def opening(self) -> list[str]:
        body = self.body("in_progress")
        return [self._event("response.created", response=body),
                self._event("response.in_progress", response=body)]

    def event(self, event: TokenEvent) -> list[str]:
        out = [line for step, lp in self._steps(event) for line in self._write(step, lp)]
        if event.result is None:
            return out
        body = self._finish(event.result)
        return [*out, self._event(f"response.{body['status']}", response=body)]

    def error_event(self, err: APIError) -> str:
        body = self.body("failed") | {"error": {"code": err.code, "message": err.message}}
        return self._event("response.failed", response=body)

    # --- the response object ------------------------------------------------------
    def body(self, status: str, res: GenerationResult | None = None) -> dict[str, Any]:
        req, fmt = self.req, self.req.text.format if self.req.text else None
        output = [self._item(s, "incomplete" if s.cut else "completed")
                  for s in self.segments.segments] if res is not None else []
        asked = req.reasoning
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "background": False, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
            else None, "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens, "model": self.gen.context.model,
            "output": output,
            "output_text": self.segments.joined("text") if res is not None else "",
            "parallel_tool_calls": req.parallel_tool_calls,
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": asked.effort if asked else None,
                          "summary": asked.summary if asked else None},
            "store": req.store, "temperature": req.temperature,
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt
                     else {"type": "text"}},
            "tool_choice": _echo_choice(req), "tools": [
                t.model_dump(exclude_none=True) for t in req.tools or []
                if isinstance(t, FunctionTool)],
            "top_p": req.top_p, "truncation": "disabled", "user": req.user,
            "metadata": req.metadata or {}, "usage": usage(res) if res is not None else None,
        }
        if self.warnings:
            out["warnings"] = self.warnings
        if res is not None:
            out["ffwd"] = res.ffwd_block()
        return out

    def _finish(self, res: GenerationResult) -> dict[str, Any]:
        body = self.body("incomplete" if res.finish_reason == "length" else "completed", res)
        if self.store is not None and self.req.store:
            self.store.put(self.gen.context.tenant, self.id, body,
                           [*self.conversation, self._as_message()])
        return body

    def _as_message(self) -> dict[str, Any]:
        """The reply as the template reads an assistant turn (for a follow-up)."""
        segs = self.segments.segments
        msg: dict[str, Any] = {"role": "assistant", "content": self.segments.joined("text")}
        calls = [{"id": self._ids(s)[1], "type": "function",
                  "function": {"name": s.name, "arguments": json.dumps(s.arguments())}}
                 for s in segs if s.kind == "call"]
        reasoning = self.segments.joined("reasoning")
        return (msg | ({"tool_calls": calls} if calls else {})
                | ({"reasoning_content": reasoning} if reasoning else {}))

    # --- items and events ---------------------------------------------------------
    def _steps(self, event: TokenEvent) -> Steps:
        """The steps of an event's deltas, each text delta with its tokens' logprobs (a
        reasoning delta's tokens have none to give: reasoning_text carries no logprobs);
        the last event's then close the last item."""
        res = event.result
        if res is None and self.gen.logprobs is not None:
            self.pending.append(event)
        out: Steps = []
        for step in self.segments.feed(event.deltas):
            lp: list[dict[str, Any]] = []
            if step.kind == "delta" and step.segment.kind == "text":
                lp, self.pending = [token_logprob(t) for t in self.pending], []
                self.logprobs.setdefault(step.segment.position, []).extend(lp)
            elif step.kind == "delta" and step.segment.kind == "reasoning":
                # Its tokens are reasoning's; this one stays if its text goes on as content.
                content = any(isinstance(d, ContentDelta) for d in event.deltas)
                self.pending = [e for e in self.pending if content and e is event]
            out.append((step, lp))
        if res is not None:
            out += [(s, []) for s in self.segments.close(res.finish_reason == "length")]
        return out

    def _ids(self, seg: Segment) -> tuple[str, str]:
        if seg.position not in self.ids:
            self.ids[seg.position] = (new_id(ID_PREFIXES[seg.kind]), new_id("call_"))
        return self.ids[seg.position]

    def _item(self, seg: Segment, status: str) -> dict[str, Any]:
        item_id, call_id = self._ids(seg)
        if seg.kind == "call":
            return {"type": "function_call", "id": item_id, "call_id": call_id,
                    "name": seg.name, "arguments": seg.text if status != "in_progress" else "",
                    "status": status}
        parts = [self._part(seg)] if status != "in_progress" else []
        if seg.kind == "reasoning":
            return {"type": "reasoning", "id": item_id, "summary": [], "content": parts,
                    "status": status}
        return {"type": "message", "id": item_id, "status": status, "role": "assistant",
                "content": parts}

    def _part(self, seg: Segment, text: str | None = None) -> dict[str, Any]:
        if seg.kind == "reasoning":
            return {"type": "reasoning_text", "text": seg.text if text is None else text}
        return {"type": "output_text", "text": seg.text if text is None else text,
                "annotations": [], "logprobs": self.logprobs.get(seg.position, [])
                if text is None else []}

    def _write(self, step: Step, lp: list[dict[str, Any]]) -> list[str]:
        seg = step.segment
        where = {"item_id": self._ids(seg)[0], "output_index": seg.position}
        if seg.kind != "call":
            where["content_index"] = 0
        if step.kind == "open":
            added = self._event("response.output_item.added", output_index=seg.position,
                                item=self._item(seg, "in_progress"))
            return [added] if seg.kind == "call" else [
                added, self._event("response.content_part.added", **where,
                                   part=self._part(seg, ""))]
        if step.kind == "delta":
            return [self._delta(seg, step.text, where, lp)]
        if seg.kind == "call":
            out = [self._event("response.function_call_arguments.done", **where, name=seg.name,
                               arguments=seg.text)]
        else:
            part = self._part(seg)
            done = {"logprobs": part["logprobs"]} if seg.kind == "text" else {}
            out = [self._event(f"response.{TEXT_EVENTS[seg.kind]}.done", **where,
                               text=seg.text, **done),
                   self._event("response.content_part.done", **where, part=part)]
        item = self._item(seg, "incomplete" if seg.cut else "completed")
        return [*out, self._event("response.output_item.done", output_index=seg.position,
                                  item=item)]

    def _delta(self, seg: Segment, piece: str, where: dict[str, Any],
               lp: list[dict[str, Any]]) -> str:
        if seg.kind == "call":
            return self._event("response.function_call_arguments.delta", **where, delta=piece)
        if seg.kind == "reasoning":
            return self._event("response.reasoning_text.delta", **where, delta=piece)
        return self._event("response.output_text.delta", **where, delta=piece, logprobs=lp)

    def _event(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"


def _echo_choice(req: ResponsesRequest) -> Any:
    tc = req.tool_choice
    if tc is None:
        return "auto"
    return tc if isinstance(tc, str) else tc.model_dump()


def usage(res: GenerationResult) -> dict[str, Any]:
    """The Responses usage: the output ids that wrote reasoning are counted among the
    output's (``output_tokens_details.reasoning_tokens``), as OpenAI counts them."""
    return {
        "input_tokens": res.prompt_tokens,
        "input_tokens_details": {"cached_tokens": res.cached_tokens},
        "output_tokens": res.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": res.reasoning_tokens},
        "total_tokens": res.prompt_tokens + res.completion_tokens,
    } | capped(res)
