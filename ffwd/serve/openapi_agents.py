"""What the agents' APIs answer, as the served OpenAPI document declares it: OpenAI
Responses (the response object and its stream events) and Anthropic Messages (the
message, its stream events, ``count_tokens``). Descriptions only, as in
`ffwd.serve.openapi_openai`; stream events are unions tagged by ``type``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ffwd.serve.openapi_openai import (
    AnthropicErrorDetail,
    Count,
    FfwdBlock,
    TokenLogprob,
    UsageCap,
)

ItemStatus = Literal["in_progress", "completed", "incomplete"]
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


# --- OpenAI Responses -------------------------------------------------------------
class OutputText(BaseModel):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[TokenLogprob]


class OutputMessage(BaseModel):
    type: Literal["message"]
    id: str
    status: ItemStatus
    role: Literal["assistant"]
    content: list[OutputText]


class OutputFunctionCall(BaseModel):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str  # JSON text ("" while the item is in progress)
    status: ItemStatus


class ReasoningTextPart(BaseModel):
    type: Literal["reasoning_text"]
    text: str


class OutputReasoning(BaseModel):
    """The model's reasoning, before the items it led to (no summaries: ffwd writes none)."""

    type: Literal["reasoning"]
    id: str
    summary: list[Any]  # always empty
    content: list[ReasoningTextPart]  # one part ([] while the item is in progress)
    status: ItemStatus


OutputItem = Annotated[OutputMessage | OutputFunctionCall | OutputReasoning,
                       Field(discriminator="type")]


class InputTokensDetails(BaseModel):
    cached_tokens: Count


class OutputTokensDetails(BaseModel):
    reasoning_tokens: Count  # of output_tokens: the ids that wrote reasoning


class ResponseUsage(BaseModel):
    input_tokens: Count
    input_tokens_details: InputTokensDetails
    output_tokens: Count
    output_tokens_details: OutputTokensDetails
    total_tokens: Count
    ffwd: UsageCap | None = None  # only where the server capped max_output_tokens


class ResponseError(BaseModel):
    code: str
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class ResponseText(BaseModel):
    format: dict[str, Any]  # the request's text.format, or {"type": "text"}


class Response(BaseModel):
    """``POST /v1/responses`` whole, ``GET /v1/responses/{id}``, and in stream events."""

    id: str
    object: Literal["response"]
    created_at: Count
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    background: bool
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: Count | None
    model: str
    output: list[OutputItem]
    output_text: str
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: dict[str, Any]  # {"effort", "summary"}: the request's
    store: bool
    temperature: float
    text: ResponseText
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float
    truncation: str
    user: str | None
    metadata: dict[str, str]
    usage: ResponseUsage | None
    warnings: list[str] | None = None  # what the model was not shown, and why
    ffwd: FfwdBlock | None = None  # once the generation has ended


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class _Event(BaseModel):
    sequence_number: Count


class ResponseLifecycleEvent(_Event):
    type: Literal["response.created", "response.in_progress", "response.completed",
                  "response.incomplete", "response.failed"]
    response: Response


class OutputItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: Count
    item: OutputItem


class ContentPartEvent(_Event):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: Count
    content_index: Count
    part: Annotated[OutputText | ReasoningTextPart, Field(discriminator="type")]


class OutputTextDeltaEvent(_Event):
    type: Literal["response.output_text.delta"]
    item_id: str
    output_index: Count
    content_index: Count
    delta: str
    logprobs: list[TokenLogprob]


class OutputTextDoneEvent(_Event):
    type: Literal["response.output_text.done"]
    item_id: str
    output_index: Count
    content_index: Count
    text: str
    logprobs: list[TokenLogprob]


class ReasoningTextDeltaEvent(_Event):
    type: Literal["response.reasoning_text.delta"]
    item_id: str
    output_index: Count
    content_index: Count
    delta: str


class ReasoningTextDoneEvent(_Event):
    type: Literal["response.reasoning_text.done"]
    item_id: str
    output_index: Count
    content_index: Count
    text: str


class ArgumentsDeltaEvent(_Event):
    type: Literal["response.function_call_arguments.delta"]
    item_id: str
    output_index: Count
    delta: str


class ArgumentsDoneEvent(_Event):
    type: Literal["response.function_call_arguments.done"]
    item_id: str
    output_index: Count
    name: str
    arguments: str


ResponseStreamEvent = Annotated[
    ResponseLifecycleEvent | OutputItemEvent | ContentPartEvent | OutputTextDeltaEvent
    | OutputTextDoneEvent | ReasoningTextDeltaEvent | ReasoningTextDoneEvent
    | ArgumentsDeltaEvent | ArgumentsDoneEvent,
    Field(discriminator="type"),
]


# --- Anthropic Messages ------------------------------------------------------------
class TextContent(BaseModel):
    type: Literal["text"]
    text: str


class ToolUseContent(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ThinkingContent(BaseModel):
    """The model's reasoning, before the blocks it led to."""

    type: Literal["thinking"]
    thinking: str
    signature: Literal[""]  # ffwd does not sign its reasoning


ContentBlock = Annotated[TextContent | ToolUseContent | ThinkingContent,
                         Field(discriminator="type")]


class MessageUsage(BaseModel):
    input_tokens: Count  # the prompt ids not read from the cache
    cache_creation_input_tokens: Count
    cache_read_input_tokens: Count
    output_tokens: Count
    ffwd: UsageCap | None = None  # only where the server capped max_tokens


class MessageResponse(BaseModel):
    """``POST /v1/messages``, whole (and, empty, in ``message_start``)."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None  # null only in message_start
    stop_sequence: str | None
    usage: MessageUsage
    warnings: list[str] | None = None
    ffwd: FfwdBlock | None = None


class TokenCount(BaseModel):
    """``POST /v1/messages/count_tokens``."""

    input_tokens: Count


class MessageStartEvent(BaseModel):
    type: Literal["message_start"]
    message: MessageResponse


class PingEvent(BaseModel):
    type: Literal["ping"]


class ContentBlockStartEvent(BaseModel):
    type: Literal["content_block_start"]
    index: Count
    content_block: ContentBlock


class TextDelta(BaseModel):
    type: Literal["text_delta"]
    text: str


class InputJsonDelta(BaseModel):
    type: Literal["input_json_delta"]
    partial_json: str


class ThinkingDelta(BaseModel):
    type: Literal["thinking_delta"]
    thinking: str


class SignatureDelta(BaseModel):
    """A thinking block's last delta, before its stop: the signature (always "")."""

    type: Literal["signature_delta"]
    signature: Literal[""]


class ContentBlockDeltaEvent(BaseModel):
    type: Literal["content_block_delta"]
    index: Count
    delta: Annotated[TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta,
                     Field(discriminator="type")]


class ContentBlockStopEvent(BaseModel):
    type: Literal["content_block_stop"]
    index: Count


class MessageDelta(BaseModel):
    stop_reason: StopReason
    stop_sequence: str | None


class MessageDeltaEvent(BaseModel):
    type: Literal["message_delta"]
    delta: MessageDelta
    usage: MessageUsage


class MessageStopEvent(BaseModel):
    type: Literal["message_stop"]


class MessageErrorEvent(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorDetail


MessageStreamEvent = Annotated[
    MessageStartEvent | PingEvent | ContentBlockStartEvent | ContentBlockDeltaEvent
    | ContentBlockStopEvent | MessageDeltaEvent | MessageStopEvent | MessageErrorEvent,
    Field(discriminator="type"),
]
