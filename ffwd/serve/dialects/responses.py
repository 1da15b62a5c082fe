"""The OpenAI Responses API (``POST /v1/responses``): requests in, responses and events out.

`responses_request` translates a validated `ResponsesRequest` (and the
conversation a ``previous_response_id`` continues) into a `GenerationRequest`:
``instructions`` and leading system/developer items become the system
message, ``message`` items messages, ``function_call`` items the assistant's
tool calls and ``function_call_output`` items tool messages; ``reasoning``
items become the ``reasoning_content`` of the assistant turn that follows them
(a call's reasoning joins its turn's; dropped where no assistant turn follows),
and ``reasoning.effort`` the request's `Reasoning`.
Items and tools of types ffwd does not run (``web_search``, ``local_shell``,
``custom``, ...) are dropped, with a warning on the response. A named function
choice is exactly one call. `responses_writer.ResponsesWriter` writes the
events back (a whole response object, or the Responses event stream), and
keeps the response for ``previous_response_id`` under its tenant (the API key
that asked, `ffwd.serve.middleware.tenant`).
"""

from __future__ import annotations

import json
from typing import Any

from ffwd.engine.sample.sampling import SamplingParams
from ffwd.serve.dialects.common import (
    at_most_max_tools,
    check_choice,
    effort_reasoning,
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
    ReasoningItem,
    ResponsesRequest,
)
from ffwd.serve.dialects.responses_writer import ResponsesWriter, Translated
from ffwd.serve.dialects.store import ResponseStore
from ffwd.serve.errors import bad_request
from ffwd.serve.request import Context, GenerationRequest

__all__ = ["ResponsesWriter", "Translated", "open_response", "responses_request"]

# How this API spells the fields a prepared request may be refused for.
PARAMS = {"messages": "input", "prompt": "input", "max_tokens": "max_output_tokens",
          "response_format": "text.format"}
SILENT_ITEMS: frozenset[str] = frozenset()  # accepted and not shown, without a warning


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
        reasoning=effort_reasoning(req.reasoning.effort if req.reasoning else None),
    )
    return Translated(gen, conversation, warnings)


def input_messages(req: ResponsesRequest, warnings: list[str]) -> list[dict[str, Any]]:
    """`req.input` as template messages (instructions not included)."""
    if req.input is None:
        return []
    if isinstance(req.input, str):
        return [{"role": "user", "content": req.input}]
    out: list[dict[str, Any]] = []
    thought: list[str] = []  # reasoning items not yet given to an assistant turn
    for i, item in enumerate(req.input):
        if isinstance(item, ReasoningItem):  # (one with nothing readable: nothing)
            thought += [item.text] if item.text else []
            continue
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
        else:
            if item.type not in SILENT_ITEMS:
                warnings.append(f"input[{i}]: items of type {item.type!r} are not supported; "
                                "skipped")
            continue
        if out[-1]["role"] == "assistant" and thought:  # (a call joins its turn's)
            out[-1]["reasoning_content"] = out[-1].get("reasoning_content", "") + "".join(
                thought)
        thought = []  # reasoning before a turn that is not the assistant's is dropped
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
