"""OpenAI Chat Completions (``POST /v1/chat/completions``): requests in, JSON and chunks out.

`open_chat` translates a validated body (`ffwd.serve.protocol`) into a
`GenerationRequest` (a named ``tool_choice`` is exactly one call, as OpenAI
documents; ``parallel_tool_calls`` governs ``auto`` and ``required``;
``reasoning_effort`` is the request's `Reasoning`, ``none`` turning it off;
``chat_template_kwargs`` go to the template as they are) and makes the writer
of its response. `ChatWriter` turns each event's deltas into chunks (content,
``reasoning_content`` as llama.cpp's server and vLLM send the model's reasoning,
or tool-call fragments with the call's id on its first) and a whole response
into one message (``reasoning_content`` only where the model reasoned); the
envelope, finish, usage and token view are `chunks.ChunkWriter`'s.
"""

from __future__ import annotations

from typing import Any

from ffwd.engine.events import GenerationResult, TokenEvent
from ffwd.serve.dialects.chunks import ChunkWriter, common_fields, token_logprob
from ffwd.serve.dialects.common import effort_reasoning, new_id, openai_parallel
from ffwd.serve.protocol import ChatCompletionRequest
from ffwd.serve.request import Context, GenerationRequest
from ffwd.templates.formats.base import ContentDelta, Delta, ReasoningDelta, ToolCallDelta


def open_chat(req: ChatCompletionRequest,
              context: Context | None = None) -> tuple[GenerationRequest, ChatWriter]:
    """The generation a validated body asks for, and the writer of its response."""
    gen = chat_request(req, context)
    tokens = bool(req.ffwd and req.ffwd.tokens)
    return gen, ChatWriter(gen, tokens=tokens, include_usage=req.include_usage)


def chat_request(req: ChatCompletionRequest,
                 context: Context | None = None) -> GenerationRequest:
    """`req` as the one request (a 400 for what the server refuses, `check`)."""
    req.check()
    limit = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    choice = req.tool_choice_value
    return GenerationRequest(
        new_id("chatcmpl-"), "chat", messages=[m.as_template_message() for m in req.messages],
        tools=list(req.tools or []), tool_choice=choice,
        parallel_tool_calls=openai_parallel(choice, req.parallel_tool_calls),
        reasoning=effort_reasoning(req.reasoning_effort),
        template_kwargs=dict(req.chat_template_kwargs or {}),
        params={"max_tokens": limit}, context=context or Context(), **common_fields(req),
    )



def parse_chat(body: dict[str, Any]) -> GenerationRequest:
    """A chat request body, validated and translated (the bench and tools build prompts so)."""
    return chat_request(ChatCompletionRequest.model_validate(body))


class ChatWriter(ChunkWriter):
    """One chat completion: its chunks' choices and the call ids it gave."""

    chunk_object = "chat.completion.chunk"
    whole_object = "chat.completion"

    def __init__(self, gen: GenerationRequest, *, tokens: bool = False,
                 include_usage: bool = False) -> None:
        super().__init__(gen, tokens=tokens, include_usage=include_usage)
        self.call_ids: dict[int, str] = {}

    def opening(self) -> list[str]:
        """The first chunk: the assistant's role."""
        return [self.chunk({"role": "assistant", "content": ""}, with_logprobs=False)]

    def delta_chunk(self, d: Delta) -> str:
        if isinstance(d, ContentDelta):
            return self.chunk({"content": d.text})
        if isinstance(d, ReasoningDelta):
            return self.chunk({"reasoning_content": d.text})
        return self.chunk({"tool_calls": [self._tool_delta(d)]})

    def stream_choice(self, part: Any, lp: dict[str, Any] | None,
                      finish: str | None) -> dict[str, Any]:
        return {"index": 0, "delta": part or {}, "logprobs": lp, "finish_reason": finish}

    def whole_choice(self, res: GenerationResult, lp: dict[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant", "content": res.content if res.content or not res.calls
            else None}
        if res.reasoning:
            message["reasoning_content"] = res.reasoning
        if res.calls:
            message["tool_calls"] = [
                {"id": self._call_id(i), "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for i, c in enumerate(res.calls)]
        return {"index": 0, "message": message, "logprobs": lp,
                "finish_reason": res.finish_reason}

    def choice_logprobs(self, items: list[TokenEvent]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        return {"content": [token_logprob(t) for t in items], "refusal": None}

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
