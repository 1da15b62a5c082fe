"""Request bodies of the OpenAI Responses API (``POST /v1/responses``), validated.

Items and tools are tagged unions on ``type``: the tags are capitalised so
that an error names the field as the API does (``input[2].arguments``, not a
validator's path). A ``reasoning`` item is earlier reasoning (`ReasoningItem`:
its ``reasoning_text`` parts, or else its summary); ``reasoning.effort`` is the
request's. Item and tool types ffwd does not run (
``web_search_call``, ``web_search``, ``local_shell``, ``custom``, ...) are kept
as `OtherItem` / `OtherTool`, which the dialect skips (with a warning on the
response where that changes what the model sees); an item type the API does not
have is a 400, as are an ``include`` value it does not list and ``n``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator
from pydantic.json_schema import JsonDict

from ffwd.serve.dialects.common import NON_TEXT_PARTS, NotAParameter, Strict, check_stops
from ffwd.serve.protocol import (
    AtLeastOne,
    Effort,
    FfwdSettings,
    Metadata,
    Seed,
    StopText,
    TopCount,
)

# The input items of the API (its SDK's `ResponseInputItemParam`) that the model is not
# shown: the calls of tools OpenAI runs, their outputs, references.
OtherItemType = Literal[
    "file_search_call", "computer_call", "computer_call_output",
    "web_search_call", "tool_search_call", "tool_search_output", "additional_tools",
    "configuration_update", "compaction", "compaction_trigger", "image_generation_call",
    "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call",
    "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools",
    "mcp_approval_request", "mcp_approval_response", "mcp_call", "item_reference", "program",
    "program_output"]
# What ``include`` may name (the SDK's `ResponseIncludable`); ffwd has logprobs to give.
Includable = Literal[
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url",
    "code_interpreter_call.outputs", "reasoning.encrypted_content",
    "message.output_text.logprobs"]
TEXT_PART_TYPES = ("input_text", "output_text", "text", "refusal", "summary_text")


def _text_parts(v: object) -> object:
    """A content value: a string, or parts of the text types (other modalities refused)."""
    if v is None or isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise ValueError("expected a string or an array of content parts")
    for i, part in enumerate(v):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in NON_TEXT_PARTS:
            raise ValueError(f"part {i} has type {kind!r}: this model takes text only "
                             "(parts of type 'input_text')")
        key = "refusal" if kind == "refusal" else "text"
        if kind not in TEXT_PART_TYPES or not isinstance(part.get(key), str):
            raise ValueError(f"part {i}: expected {{\"type\": \"input_text\", \"text\": \"...\"}}")
    return v


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(str(p["refusal"] if p.get("type") == "refusal" else p["text"])
                     for p in content)


class MessageItem(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]

    _parts = field_validator("content", mode="before")(_text_parts)

    @property
    def text(self) -> str:
        return content_text(self.content)


class FunctionCallItem(Strict):
    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, v: str) -> str:
        try:
            value = json.loads(v or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc.msg}") from None
        if not isinstance(value, dict):
            raise ValueError("expected a JSON object")
        return v


class FunctionCallOutputItem(Strict):
    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[dict[str, Any]]

    _parts = field_validator("output", mode="before")(_text_parts)

    @property
    def text(self) -> str:
        return content_text(self.output)


class CustomCallItem(Strict):
    """A call of a ``custom`` (free-form) tool, as Codex replays its history."""

    type: Literal["custom_tool_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    input: str


class CustomCallOutputItem(Strict):
    type: Literal["custom_tool_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[dict[str, Any]]

    _parts = field_validator("output", mode="before")(_text_parts)

    @property
    def text(self) -> str:
        return content_text(self.output)


class ReasoningText(Strict):
    type: Literal["reasoning_text"]
    text: str


class SummaryText(Strict):
    type: Literal["summary_text"]
    text: str


class ReasoningItem(Strict):
    """Earlier reasoning, for the assistant turn after it: its ``reasoning_text`` parts
    (what ffwd's replies carry), or its summary where it has none. Encrypted content
    (OpenAI's) cannot be read, and is not."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None

    @property
    def text(self) -> str:
        if self.content:
            return "".join(p.text for p in self.content)
        return "\n\n".join(p.text for p in self.summary)


class OtherItem(Strict):
    """An item the model is not shown (hosted tools' calls, references)."""

    type: OtherItemType

    @field_validator("type", mode="before")
    @classmethod
    def _known(cls, v: object) -> object:
        if v not in get_args(OtherItemType):
            raise ValueError(f"{v!r} is not an input item type; the API's are "
                             + ", ".join([*_ITEM_TAGS, *get_args(OtherItemType)]))
        return v


_ITEM_TAGS = {"message": "Message", "function_call": "FunctionCall",
              "function_call_output": "FunctionCallOutput", "custom_tool_call": "CustomCall",
              "custom_tool_call_output": "CustomCallOutput", "reasoning": "Reasoning"}


def _item_tag(v: object) -> str | None:
    if not isinstance(v, dict):
        return None
    kind = v.get("type", "message" if "role" in v else None)
    return _ITEM_TAGS.get(kind, "Other") if isinstance(kind, str) else None


InputItem = Annotated[
    Annotated[MessageItem, Tag("Message")] | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")]
    | Annotated[CustomCallItem, Tag("CustomCall")]
    | Annotated[CustomCallOutputItem, Tag("CustomCallOutput")]
    | Annotated[ReasoningItem, Tag("Reasoning")] | Annotated[OtherItem, Tag("Other")],
    Discriminator(_item_tag, custom_error_type="invalid_item",
                  custom_error_message="expected an input item: an object with a string 'type' "
                  "(or a 'role', for a message)"),
]


class FunctionTool(Strict):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OtherTool(Strict):
    type: str


def _tool_tag(v: object) -> str | None:
    kind = v.get("type") if isinstance(v, dict) else None
    return None if not isinstance(kind, str) else "Function" if kind == "function" else "Other"


Tool = Annotated[
    Annotated[FunctionTool, Tag("Function")] | Annotated[OtherTool, Tag("Other")],
    Discriminator(_tool_tag, custom_error_type="invalid_tool",
                  custom_error_message="expected a tool: an object with a string 'type'"),
]


class FunctionChoice(Strict):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1)]


class AllowedTools(Strict):
    """``{"type": "allowed_tools", "mode": ..., "tools": [{"type": "function", "name"}]}``."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"] = "auto"
    tools: list[FunctionChoice]


class HostedChoice(Strict):
    """A hosted tool forced by type (``{"type": "web_search"}``): ffwd runs none."""

    type: str


def _choice_tag(v: object) -> str | None:
    if isinstance(v, str):
        return "Mode"
    kind = v.get("type") if isinstance(v, dict) else None
    if not isinstance(kind, str):
        return None
    return {"function": "Function", "allowed_tools": "Allowed"}.get(kind, "Hosted")


ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("Mode")]
    | Annotated[FunctionChoice, Tag("Function")] | Annotated[AllowedTools, Tag("Allowed")]
    | Annotated[HostedChoice, Tag("Hosted")],
    Discriminator(_choice_tag, custom_error_type="invalid_tool_choice",
                  custom_error_message="expected 'none', 'auto', 'required' or "
                  '{"type": "function", "name": "..."}'),
]


class TextFormat(Strict):
    """``text.format``: ``text``, ``json_object``, or ``json_schema`` with its schema
    (optional, as in OpenAI's API: without one, the text is any JSON object)."""

    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(max_length=64)] = "response"
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(
        default=None, alias="schema",
        description="The JSON Schema the text matches; omitted: any JSON object")
    strict: bool | None = None

    def response_format(self) -> dict[str, Any] | None:
        """The OpenAI chat ``response_format`` the grammar reads."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object", "json_schema": None}
        return {"type": "json_schema", "json_schema": {
            "name": self.name, "description": self.description, "schema": self.json_schema,
            "strict": self.strict}}


class ReasoningConfig(Strict):
    """``reasoning``: its ``effort`` is the request's (``summary`` and the rest accepted:
    ffwd writes no summaries)."""

    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class TextConfig(Strict):
    format: TextFormat | None = None
    verbosity: str | None = None  # accepted, not used


# What the served document says of the rules JSON Schema can state.
INPUT_OR_PREVIOUS: JsonDict = {"anyOf": [  # the server answers 400 without either
    {"required": ["input"], "properties": {"input": {"not": {"type": "null"}, "minItems": 1}}},
    {"required": ["previous_response_id"],
     "properties": {"previous_response_id": {"type": "string"}}}]}


class ResponsesRequest(Strict):
    model_config = ConfigDict(json_schema_extra=INPUT_OR_PREVIOUS)

    model: str = "default"
    input: Annotated[str, Field(min_length=1)] | list[InputItem] | None = None
    instructions: str | None = None
    tools: Annotated[list[Tool], Field(max_length=4 * 128)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: AtLeastOne | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_logprobs: TopCount | None = None
    include: list[Includable] | None = None
    stop: StopText | Annotated[list[StopText], Field(max_length=4)] | None = None
    seed: Seed | None = None
    metadata: Metadata | None = None
    store: bool = True
    previous_response_id: str | None = None
    stream: bool = False
    reasoning: ReasoningConfig | None = None
    background: bool = Field(default=False, json_schema_extra={
        "enum": [False], "description": "not supported: omit, or false"})
    conversation: str | dict[str, Any] | None = Field(default=None, json_schema_extra={
        "type": "null", "description": "not supported (the Conversations API): omit, or null"})
    user: str | None = None
    n: NotAParameter = None  # Chat Completions' choices: one response here
    ffwd: FfwdSettings | None = None

    _stops = field_validator("stop", mode="before")(lambda v: check_stops(v, 4))

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def wants_logprobs(self) -> bool:
        return "message.output_text.logprobs" in (self.include or []) or bool(self.top_logprobs)
