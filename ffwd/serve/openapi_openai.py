"""What the OpenAI-shaped routes answer, as the served OpenAPI document declares it.

These models are never built at run time: the dialects write plain dicts, and
these describe them (`ffwd.serve.openapi` puts their JSON Schemas in the
document), so generated clients get types and an API fuzzer can check every
body. Every field the server always sends is required; fields it sends only
sometimes (``tool_calls``, ``usage`` on a stream's last chunk) are optional.
Also here: the error bodies, the ``ffwd`` block every generation reports,
``/v1/models`` and ``/health``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0)]
Byte = Annotated[int, Field(ge=0, le=255)]
FinishReason = Literal["stop", "length", "tool_calls"]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(BaseModel):
    """Every error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str
    param: str | None
    code: str


class AnthropicErrorResponse(BaseModel):
    """Every error body on ``/v1/messages``: ``{"type": "error", "error": {...}}``."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class TokenEntry(BaseModel):
    """One emitted id of the ``ffwd.tokens`` view (``"ffwd": {"tokens": true}``)."""

    id: Count
    origin: str
    text: str
    part: Literal["content", "reasoning", "call"] | None = None  # absent: held, or markup
    call: Count | None = None
    logprob: float | None = None


class FfwdBlock(BaseModel):
    """What fill and the grammar did for this generation (ignored by OpenAI's clients)."""

    fill: str
    grammar: bool
    stats: dict[str, Any]
    forward_calls: Count
    injected_by_origin: dict[str, Count]
    dropped_calls: Count
    seconds: Seconds
    prefill_seconds: Seconds
    replica: str | None = None  # under ffwd deploy
    tokens: list[TokenEntry] | None = None


class FfwdTokens(BaseModel):
    """A stream chunk's ``ffwd``: the tokens since the previous chunk."""

    tokens: list[TokenEntry]


class UsageCap(BaseModel):
    """A usage's ``ffwd``: the server lowered the request's output limit (and the run
    ended with a length finish if it reached it)."""

    max_tokens_asked: Count
    max_tokens: Count
    capped_by: Literal["max_tokens_limit", "context_window"]


class PromptTokensDetails(BaseModel):
    cached_tokens: Count


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: Count  # of completion_tokens: the ids that wrote reasoning


class Usage(BaseModel):
    prompt_tokens: Count
    completion_tokens: Count
    total_tokens: Count
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails
    ffwd: UsageCap | None = None  # only where the server capped max_tokens


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[Byte]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]
    refusal: None


class CalledFunction(BaseModel):
    name: str
    arguments: str  # JSON text


class MessageToolCall(BaseModel):
    id: str
    type: Literal["function"]
    function: CalledFunction


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None  # the model's reasoning, where it reasoned
    tool_calls: list[MessageToolCall] | None = None


class ChatChoice(BaseModel):
    index: Literal[0]
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    """``POST /v1/chat/completions``, whole."""

    id: str
    object: Literal["chat.completion"]
    created: Count
    model: str
    choices: Annotated[list[ChatChoice], Field(min_length=1, max_length=1)]
    usage: Usage
    ffwd: FfwdBlock


class FunctionDelta(BaseModel):
    name: str | None = None  # on a call's first delta
    arguments: str


class ToolCallChunk(BaseModel):
    index: Count
    id: str | None = None  # on a call's first delta
    type: Literal["function"] | None = None
    function: FunctionDelta


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallChunk] | None = None


class ChatChunkChoice(BaseModel):
    index: Literal[0]
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason | None


class ChatCompletionChunk(BaseModel):
    """One event of a streamed chat completion (no choice, with ``usage``: the last)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: Count
    model: str
    choices: Annotated[list[ChatChunkChoice], Field(max_length=1)]
    usage: Usage | None = None
    ffwd: FfwdBlock | FfwdTokens | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[Count]


class CompletionChunkChoice(BaseModel):
    index: Literal[0]
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: FinishReason | None


class CompletionChoice(CompletionChunkChoice):
    finish_reason: FinishReason


class TextCompletion(BaseModel):
    """``POST /v1/completions``, whole."""

    id: str
    object: Literal["text_completion"]
    created: Count
    model: str
    choices: Annotated[list[CompletionChoice], Field(min_length=1, max_length=1)]
    usage: Usage
    ffwd: FfwdBlock


class TextCompletionChunk(BaseModel):
    """One event of a streamed completion."""

    id: str
    object: Literal["text_completion"]
    created: Count
    model: str
    choices: Annotated[list[CompletionChunkChoice], Field(max_length=1)]
    usage: Usage | None = None
    ffwd: FfwdBlock | FfwdTokens | None = None


class Capabilities(BaseModel):
    tool_calling: bool
    tool_choice: list[str]
    parallel_tool_calls: bool
    guaranteed_tool_calls: bool
    structured_output: bool
    streaming: bool
    logprobs: bool
    vision: bool
    reasoning: bool
    deterministic: bool  # greedy output bit-identical however it is computed


class ModelEntry(BaseModel):
    """The served model, with OpenAI's fields and Anthropic's."""

    id: str
    object: Literal["model"]
    created: Count
    owned_by: str
    type: Literal["model"]
    display_name: str
    created_at: str
    aliases: list[str]
    context_window: Count | None
    endpoints: list[str]
    capabilities: Capabilities
    tool_format: str | None


class ModelList(BaseModel):
    object: Literal["list"]
    data: Annotated[list[ModelEntry], Field(min_length=1)]
    has_more: bool
    first_id: str
    last_id: str


class Health(BaseModel):
    status: Literal["ok", "draining"]  # draining: a 503, the server is going away
    model: str
    queue_depth: Count
    running: bool
    on_replicas: Count | None = None  # under ffwd deploy: runs on the replicas
