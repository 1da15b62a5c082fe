"""The Anthropic Messages API (``POST /v1/messages``): requests in, messages and events out.

`messages_request` translates a validated `MessagesRequest` (or a
`CountTokensRequest`) into a `GenerationRequest`: ``system`` becomes the
system message, without the lines that change on every request (Claude
Code's ``x-anthropic-billing-header`` block, `common.strip_volatile`), so the
prompt cache keeps the conversation's prefix; ``tool_use`` blocks become the
assistant's tool calls, its ``thinking`` blocks its ``reasoning_content`` (joined)
and ``tool_result`` blocks tool messages; ``thinking`` (``enabled`` with its
``budget_tokens``, ``disabled``, ...) is the request's `Reasoning`;
``tool_choice`` ``any`` is ``required``, ``tool`` a named function: a forced
use of that tool, as Anthropic documents, with ``disable_parallel_tool_use``
deciding whether more calls may follow (unlike OpenAI's named choice, which is
always one call). Tools Anthropic runs itself (``web_search_...``) are
skipped, named in the reply's ``warnings``. `MessagesWriter` writes the
events back, as a whole message or as Anthropic's event stream, both from the
same `Segmenter` steps: the model's reasoning as ``thinking`` blocks (streamed
as ``thinking_delta``, then a ``signature_delta`` with an empty signature, as
ffwd signs nothing), its text and calls as ``text`` and ``tool_use`` blocks. As
Anthropic's API does, the stream's ``message_start`` reports the prompt's usage
(``input_tokens``, ``cache_read_input_tokens``), so it waits for the first
event, which carries what the prefill read; ``message_delta`` then gives the whole usage, the output
count with it, the same as a whole reply's.
"""

from __future__ import annotations

import json
from typing import Any

from ffwd.engine.events import GenerationResult, PromptRead, TokenEvent
from ffwd.engine.sample.sampling import SamplingParams
from ffwd.serve.dialects.common import (
    at_most_max_tools,
    capped,
    check_choice,
    function_tool,
    new_id,
    strip_volatile,
)
from ffwd.serve.dialects.messages_models import (
    CountTokensRequest,
    CustomTool,
    InputMessage,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ffwd.serve.dialects.segments import Segment, Segmenter, Step
from ffwd.serve.errors import APIError, anthropic_body
from ffwd.serve.request import Context, GenerationRequest

PARAMS = {"max_tokens": "max_tokens", "stop": "stop_sequences",
          "response_format": "output_config.format"}
STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn",
                "cancelled": "end_turn"}
# A run's stream delta: its type, and the key its text goes under.
DELTAS = {"text": ("text_delta", "text"), "reasoning": ("thinking_delta", "thinking"),
          "call": ("input_json_delta", "partial_json")}


def open_message(req: MessagesRequest,
                 context: Context | None = None) -> tuple[GenerationRequest, MessagesWriter]:
    """The generation a validated request asks for and the writer of its response."""
    gen, warnings = messages_request(req, new_id("msg_"), context)
    return gen, MessagesWriter(gen, warnings)


def messages_request(req: CountTokensRequest, reply_id: str, context: Context | None = None
                     ) -> tuple[GenerationRequest, list[str]]:
    """The generation `req` asks for, and the warnings for its reply (``count_tokens``
    renders its prompt: the same checks, the same prompt)."""
    req.check()
    warnings: list[str] = []
    system = strip_volatile(req.system_text)
    messages = ([{"role": "system", "content": system}] if system else []) + [
        m for i, msg in enumerate(req.messages) for m in template_messages(msg, i)]
    tools = function_tools(req, warnings)
    choice, parallel = tool_choice(req, tools)
    sampling = SamplingParams(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                              seed=req.seed)
    gen = GenerationRequest(
        reply_id, "chat", messages=messages, tools=tools, tool_choice=choice,
        parallel_tool_calls=parallel, sampling=sampling, params=PARAMS,
        context=context or Context(), max_tokens=req.max_tokens,
        stop=tuple(req.stop_sequences or ()),
        fill=req.ffwd.fill_overrides() if req.ffwd else None, stream=req.stream,
        reasoning=req.reasoning,
        response_format=req.output_config.response_format() if req.output_config else None)
    return gen, warnings


def template_messages(msg: InputMessage, i: int) -> list[dict[str, Any]]:
    """One Anthropic message as the chat template reads it: a user message's tool results
    become tool messages (in their order), an assistant's tool_use blocks its tool calls
    and its thinking blocks, joined as the reply's reasoning was, its reasoning_content."""
    if isinstance(msg.content, str) or msg.role == "system":
        text = msg.content if isinstance(msg.content, str) else "\n".join(
            b.text for b in msg.content if isinstance(b, TextBlock))
        return [{"role": msg.role, "content": strip_volatile(text) if msg.role == "system"
                 else text}]
    if msg.role == "assistant":
        text = "\n".join(b.text for b in msg.content if isinstance(b, TextBlock))
        calls = [{"id": b.id, "type": "function", "function": {
            "name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)}}
            for b in msg.content if isinstance(b, ToolUseBlock)]
        thoughts = [b.thinking for b in msg.content if isinstance(b, ThinkingBlock)]
        return [{"role": "assistant", "content": text} | ({"tool_calls": calls} if calls else {})
                | ({"reasoning_content": "".join(thoughts)} if thoughts else {})]
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in msg.content:
        if isinstance(block, ToolResultBlock):
            if texts:
                out.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            content = ("Error: " if block.is_error else "") + block.text
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        elif isinstance(block, TextBlock):
            texts.append(block.text)
    if texts or not out:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def function_tools(req: CountTokensRequest, warnings: list[str]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, CustomTool):
            out.append(function_tool(tool.name, tool.input_schema, tool.description,
                                     tool.strict))
        else:
            warnings.append(f"tools[{i}]: tools of type {tool.type!r} run on Anthropic's "
                            "servers, not here; skipped")
    return at_most_max_tools(out)


def tool_choice(req: CountTokensRequest, tools: list[dict[str, Any]]
                ) -> tuple[str | dict[str, Any], bool]:
    """The chat form of ``tool_choice`` and whether several calls may be made."""
    tc = req.tool_choice
    if tc is None:
        return ("auto" if tools else "none"), True
    choice: str | dict[str, Any] = {"auto": "auto", "any": "required", "none": "none"}.get(
        tc.type, "")
    if tc.type == "tool":
        choice = {"type": "function", "function": {"name": tc.name}}
    if tc.type == "auto" and not tools:
        choice = "none"
    check_choice(choice, tools, "tool_choice", "tool")
    return choice, not tc.disable_parallel_tool_use


class MessagesWriter:
    """One reply's state: its content blocks so far and the ids of its tool_use blocks."""

    def __init__(self, gen: GenerationRequest, warnings: list[str] | None = None) -> None:
        self.id = gen.id
        self.model = gen.context.model
        self.warnings = warnings or []
        self.segments = Segmenter()
        self.tool_ids: dict[int, str] = {}
        self.started = False  # message_start sent

    # --- the Writer protocol ---------------------------------------------------
    def collect(self, event: TokenEvent) -> None:
        self._steps(event)

    def whole(self, res: GenerationResult) -> dict[str, Any]:
        return self.message(res)

    def opening(self) -> list[str]:
        return []  # message_start reports the prompt's usage: it comes with the first event

    def event(self, event: TokenEvent) -> list[str]:
        out = [] if self.started else self._start(event)
        out += [line for step in self._steps(event) for line in self._write(step)]
        if event.result is None:
            return out
        done = self.message(event.result)
        delta = {"stop_reason": done["stop_reason"], "stop_sequence": done["stop_sequence"]}
        return [*out, self._event("message_delta", delta=delta, usage=done["usage"]),
                self._event("message_stop")]

    def error_event(self, err: APIError) -> str:
        return self._event("error", **{k: v for k, v in anthropic_body(err).items()
                                       if k != "type"})

    def _start(self, event: TokenEvent) -> list[str]:
        """``message_start`` (with the prompt's usage, read off the first event) and a ping."""
        self.started = True
        read = event.prompt or PromptRead(0, 0)
        return [self._event("message_start", message=self.message(None, read)),
                self._event("ping")]

    # --- the message ------------------------------------------------------------
    def message(self, res: GenerationResult | None,
                read: PromptRead | None = None) -> dict[str, Any]:
        """The whole message (`res`), or the empty one ``message_start`` carries, with the
        prompt's usage as the prefill `read` it."""
        if res is not None:
            read = PromptRead(res.prompt_tokens, res.cached_tokens)
        out: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [self._block(s) for s in self.segments.segments] if res else [],
            "stop_reason": stop_reason(res, self.segments.segments) if res else None,
            "stop_sequence": res.stop_sequence if res else None,
            "usage": usage(read or PromptRead(0, 0), res.completion_tokens if res else 0)
            | capped(res),
        }
        if self.warnings:
            out["warnings"] = self.warnings
        if res is not None:
            out["ffwd"] = res.ffwd_block()
        return out

    def _steps(self, event: TokenEvent) -> list[Step]:
        """The steps of an event's deltas; the last event's then close the last block."""
        steps = list(self.segments.feed(event.deltas))
        if event.result is not None:
            steps += self.segments.close(cut=event.result.finish_reason == "length")
        return steps

    def _tool_id(self, seg: Segment) -> str:
        return self.tool_ids.setdefault(seg.position, new_id("toolu_"))

    def _block(self, seg: Segment, opening: bool = False) -> dict[str, Any]:
        if seg.kind == "text":
            return {"type": "text", "text": "" if opening else seg.text}
        if seg.kind == "reasoning":  # no signature: ffwd does not sign its reasoning
            return {"type": "thinking", "thinking": "" if opening else seg.text,
                    "signature": ""}
        return {"type": "tool_use", "id": self._tool_id(seg), "name": seg.name,
                "input": {} if opening else seg.arguments()}

    def _write(self, step: Step) -> list[str]:
        seg = step.segment
        if step.kind == "open":
            return [self._event("content_block_start", index=seg.position,
                                content_block=self._block(seg, opening=True))]
        if step.kind == "delta":
            kind, key = DELTAS[seg.kind]
            return [self._event("content_block_delta", index=seg.position,
                                delta={"type": kind, key: step.text})]
        stop = [self._event("content_block_stop", index=seg.position)]
        if seg.kind != "reasoning":
            return stop
        signed = {"type": "signature_delta", "signature": ""}  # just before the stop
        return [self._event("content_block_delta", index=seg.position, delta=signed), *stop]

    @staticmethod
    def _event(kind: str, **fields: Any) -> str:
        body = json.dumps({"type": kind, **fields}, ensure_ascii=False)
        return f"event: {kind}\ndata: {body}\n\n"


def stop_reason(res: GenerationResult, segments: list[Segment]) -> str:
    if res.finish_reason == "stop" and res.stop_sequence is not None:
        return "stop_sequence"
    if res.finish_reason != "length" and any(s.kind == "call" for s in segments):
        return "tool_use"
    return STOP_REASONS[res.finish_reason]


def usage(read: PromptRead, output: int) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` are the prompt ids not read from the cache
    (ffwd caches prompts by itself: no ids are billed as written to it).

    >>> usage(PromptRead(tokens=120, cached=100), 7)["input_tokens"]
    20
    """
    return {"input_tokens": read.tokens - read.cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": read.cached, "output_tokens": output}
