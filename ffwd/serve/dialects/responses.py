"""The OpenAI Responses API (``POST /v1/responses``): requests in, responses and events out.

`responses_request` translates a validated `ResponsesRequest` (and the
conversation a ``previous_response_id`` continues) into a `GenerationRequest`:
``instructions`` and leading system/developer items become the system
message, ``message`` items messages, ``function_call`` items the assistant's
tool calls and ``function_call_output`` items tool messages; ``reasoning``
items are dropped, and so, with a warning on the response, are items and
tools of types ffwd does not run (``web_search``, ``local_shell``,
``custom``, ...). A named function choice is exactly one call.
`ResponsesWriter` writes the events back: a whole response object, or the
Responses event stream (``response.created``, ..., ``response.completed``),
both built from the same `Segmenter` steps. The
response is kept for ``previous_response_id`` under its tenant (the API key
that asked, `ffwd.serve.middleware.tenant`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ffwd.engine.events import GenerationResult, TokenEvent
from ffwd.engine.sample.sampling import SamplingParams
from ffwd.serve.dialects.chunks import token_logprob
from ffwd.serve.dialects.common import (
    at_most_max_tools,
    capped,
    check_choice,
    function_tool,
    new_id,
    not_found,
    openai_parallel,
    refused,
)
from ffwd.serve.dialects.responses_models import (
    AllowedTools,
    CustomCallItem,
    CustomCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    FunctionTool,
    MessageItem,
    ResponsesRequest,
)
from ffwd.serve.dialects.segments import Segment, Segmenter, Step
from ffwd.serve.dialects.store import ResponseStore
from ffwd.serve.errors import APIError, bad_request
from ffwd.serve.request import Context, GenerationRequest

# How this API spells the fields a prepared request may be refused for.
PARAMS = {"messages": "input", "prompt": "input", "max_tokens": "max_output_tokens",
          "response_format": "text.format"}
SILENT_ITEMS = frozenset({"reasoning"})  # accepted and not shown, without a warning
Steps = list[tuple[Step, list[dict[str, Any]]]]


@dataclass(frozen=True)
class Translated:
    gen: GenerationRequest
    conversation: list[dict[str, Any]]  # history and input, as messages (no instructions)
    warnings: list[str]  # what was skipped, for the response's `warnings`


def open_response(req: ResponsesRequest, store: ResponseStore,
                  context: Context | None = None) -> tuple[GenerationRequest, ResponsesWriter]:
    """The generation a validated request asks for and the writer of its response."""
    context = context or Context()
    history = history_of(store, context.tenant, req.previous_response_id)
    t = responses_request(req, new_id("resp_"), history, context)
    return t.gen, ResponsesWriter(req, t, store)


def responses_request(req: ResponsesRequest, reply_id: str, history: list[dict[str, Any]],
                      context: Context | None = None) -> Translated:
    """The generation `req` asks for after `history` (see the module docstring)."""
    if req.background:
        raise refused("background", "background responses are not supported: send the "
                      "request without it (stream: true for early output)")
    if req.conversation is not None:
        raise refused("conversation", "the Conversations API is not supported: continue "
                      "with previous_response_id, or send the whole input")
    warnings: list[str] = []
    conversation = history + input_messages(req, warnings)
    if not conversation:  # nothing to answer: no input, no message in it, no earlier turn
        raise bad_request("'input': is required" if req.input is None else
                          "'input': has no message for the model to answer (an empty array, "
                          "or only items the model is not shown)", param="input",
                          code="missing_required_parameter" if req.input is None
                          else "invalid_value")
    tools = function_tools(req, warnings)
    choice, tools = tool_choice(req, tools)
    fmt = req.text.format if req.text else None
    gen = GenerationRequest(
        reply_id, "chat", messages=with_instructions(req.instructions, conversation),
        tools=tools, tool_choice=choice,
        parallel_tool_calls=openai_parallel(choice, req.parallel_tool_calls),
        sampling=SamplingParams(temperature=req.temperature, top_p=req.top_p, seed=req.seed),
        max_tokens=req.max_output_tokens, stop=tuple(req.stop_list),
        response_format=fmt.response_format() if fmt else None,
        fill=req.ffwd.fill_overrides() if req.ffwd else None,
        logprobs=(req.top_logprobs or 0) if req.wants_logprobs else None,
        stream=req.stream, params=PARAMS, context=context or Context(),
    )
    return Translated(gen, conversation, warnings)


def input_messages(req: ResponsesRequest, warnings: list[str]) -> list[dict[str, Any]]:
    """`req.input` as template messages (instructions not included)."""
    if req.input is None:
        return []
    if isinstance(req.input, str):
        return [{"role": "user", "content": req.input}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(req.input):
        if isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            out.append({"role": role, "content": item.text})
        elif isinstance(item, FunctionCallItem | CustomCallItem):
            args = (item.arguments if isinstance(item, FunctionCallItem)
                    else json.dumps({"input": item.input}, ensure_ascii=False))
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": args or "{}"}}
            if out and out[-1]["role"] == "assistant":  # the same turn's calls
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem | CustomCallOutputItem):
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
        elif item.type not in SILENT_ITEMS:
            warnings.append(f"input[{i}]: items of type {item.type!r} are not supported; "
                            "skipped")
    return out


def with_instructions(instructions: str | None,
                      messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`instructions` and the leading system messages as one system message, first."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    texts = ([instructions] if instructions else []) + [m["content"] for m in messages[:lead]]
    system = [{"role": "system", "content": "\n\n".join(texts)}] if texts else []
    return system + messages[lead:]


def function_tools(req: ResponsesRequest, warnings: list[str]) -> list[dict[str, Any]]:
    """The function tools in OpenAI chat form; other types skipped, each with a warning."""
    out = []
    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, FunctionTool):
            out.append(function_tool(tool.name, tool.parameters, tool.description, tool.strict))
        else:
            warnings.append(f"tools[{i}]: tools of type {tool.type!r} are not supported "
                            "(ffwd runs function tools); skipped")
    return at_most_max_tools(out)


def tool_choice(req: ResponsesRequest, tools: list[dict[str, Any]]
                ) -> tuple[str | dict[str, Any], list[dict[str, Any]]]:
    """The chat form of ``tool_choice``, and the tools it allows (``allowed_tools``)."""
    tc = req.tool_choice
    choice: str | dict[str, Any]
    if tc is None:
        choice = "auto" if tools else "none"
    elif isinstance(tc, str):
        choice = tc
    elif isinstance(tc, FunctionChoice):
        choice = {"type": "function", "function": {"name": tc.name}}
    elif isinstance(tc, AllowedTools):
        allowed = {t.name for t in tc.tools}
        known = {t["function"]["name"] for t in tools}
        for j, t in enumerate(tc.tools):
            if t.name not in known:
                raise bad_request(f"allowed tool {t.name!r} is not among the function tools",
                                  param=f"tool_choice.tools[{j}].name", code="unknown_tool")
        choice, tools = tc.mode, [t for t in tools if t["function"]["name"] in allowed]
    else:
        raise bad_request(f"tool_choice: tools of type {tc.type!r} are not supported (ffwd "
                          "runs function tools)", param="tool_choice", code="unsupported_value")
    check_choice(choice, tools, "tool_choice", "function")
    return choice, tools


def history_of(store: ResponseStore, tenant: str,
               previous: str | None) -> list[dict[str, Any]]:
    """The conversation `previous` ended (a 404 when the store does not hold it)."""
    if previous is None:
        return []
    stored = store.get(tenant, previous)
    if stored is None:
        raise not_found(f"previous response with id {previous!r} not found (responses are "
                        "kept for a while only, and only when sent with store: true)",
                        "previous_response_id", "previous_response_not_found")
    return list(stored.messages)


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
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "background": False, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
            else None, "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens, "model": self.gen.context.model,
            "output": output,
            "output_text": "".join(s.text for s in self.segments.segments if s.kind == "text")
            if res is not None else "", "parallel_tool_calls": req.parallel_tool_calls,
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": None, "summary": None}, "store": req.store,
            "temperature": req.temperature,
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
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(
            s.text for s in segs if s.kind == "text")}
        calls = [{"id": self._ids(s)[1], "type": "function",
                  "function": {"name": s.name, "arguments": json.dumps(s.arguments())}}
                 for s in segs if s.kind == "call"]
        return msg | ({"tool_calls": calls} if calls else {})

    # --- items and events ---------------------------------------------------------
    def _steps(self, event: TokenEvent) -> Steps:
        """The steps of an event's deltas, each text delta with its tokens' logprobs; the
        last event's then close the last item."""
        res = event.result
        if res is None and self.gen.logprobs is not None:
            self.pending.append(event)
        out: Steps = []
        for step in self.segments.feed(event.deltas):
            lp: list[dict[str, Any]] = []
            if step.kind == "delta" and step.segment.kind == "text":
                lp, self.pending = [token_logprob(t) for t in self.pending], []
                self.logprobs.setdefault(step.segment.position, []).extend(lp)
            out.append((step, lp))
        if res is not None:
            out += [(s, []) for s in self.segments.close(res.finish_reason == "length")]
        return out

    def _ids(self, seg: Segment) -> tuple[str, str]:
        if seg.position not in self.ids:
            prefix = "msg_" if seg.kind == "text" else "fc_"
            self.ids[seg.position] = (new_id(prefix), new_id("call_"))
        return self.ids[seg.position]

    def _item(self, seg: Segment, status: str) -> dict[str, Any]:
        item_id, call_id = self._ids(seg)
        if seg.kind == "call":
            return {"type": "function_call", "id": item_id, "call_id": call_id,
                    "name": seg.name, "arguments": seg.text if status != "in_progress" else "",
                    "status": status}
        parts = [self._part(seg)] if status != "in_progress" else []
        return {"type": "message", "id": item_id, "status": status, "role": "assistant",
                "content": parts}

    def _part(self, seg: Segment, text: str | None = None) -> dict[str, Any]:
        return {"type": "output_text", "text": seg.text if text is None else text,
                "annotations": [], "logprobs": self.logprobs.get(seg.position, [])
                if text is None else []}

    def _write(self, step: Step, lp: list[dict[str, Any]]) -> list[str]:
        seg = step.segment
        where = {"item_id": self._ids(seg)[0], "output_index": seg.position}
        text = seg.kind == "text"
        if step.kind == "open":
            added = self._event("response.output_item.added", output_index=seg.position,
                                item=self._item(seg, "in_progress"))
            return [added, self._event("response.content_part.added", **where, content_index=0,
                                       part=self._part(seg, ""))] if text else [added]
        if step.kind == "delta" and text:
            return [self._event("response.output_text.delta", **where, content_index=0,
                                delta=step.text, logprobs=lp)]
        if step.kind == "delta":
            return [self._event("response.function_call_arguments.delta", **where,
                                delta=step.text)]
        if text:
            out = [self._event("response.output_text.done", **where, content_index=0,
                               text=seg.text, logprobs=self._part(seg)["logprobs"]),
                   self._event("response.content_part.done", **where, content_index=0,
                               part=self._part(seg))]
        else:
            out = [self._event("response.function_call_arguments.done", **where, name=seg.name,
                               arguments=seg.text)]
        item = self._item(seg, "incomplete" if seg.cut else "completed")
        return [*out, self._event("response.output_item.done", output_index=seg.position,
                                  item=item)]

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
    return {
        "input_tokens": res.prompt_tokens,
        "input_tokens_details": {"cached_tokens": res.cached_tokens},
        "output_tokens": res.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": res.prompt_tokens + res.completion_tokens,
    } | capped(res)
