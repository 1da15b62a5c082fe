"""Request bodies of the Anthropic Messages API (``POST /v1/messages`` and
``/v1/messages/count_tokens``), validated.

Content blocks and tools are tagged unions on ``type`` (capitalised tags, so
an error names the field as the API does: ``messages[1].content[0].input``).
``thinking`` blocks and the ``thinking`` setting are accepted and ignored;
image, document and server-tool blocks are refused (the model reads text), and
so are ``n`` and a ``tool_result`` that answers no ``tool_use`` of the assistant
turn before it (`CountTokensRequest.check`), as Anthropic's API refuses them.
``count_tokens`` takes the same body, its fields validated the same way, with
``max_tokens`` optional.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from ffwd.serve.dialects.common import NotAParameter, Strict, check_stops
from ffwd.serve.errors import bad_request
from ffwd.serve.protocol import AtLeastOne, FfwdSettings, Seed, StopText

MAX_STOP_SEQUENCES = 16
Name = Annotated[str, Field(min_length=1, max_length=256)]
NON_TEXT_BLOCKS = ("image", "document", "search_result", "container_upload")


class TextBlock(Strict):
    type: Literal["text"]
    text: str


class ToolUseBlock(Strict):
    type: Literal["tool_use"]
    id: Name
    name: Name
    input: dict[str, Any]


class ToolResultBlock(Strict):
    type: Literal["tool_result"]
    tool_use_id: Name
    content: str | list[TextBlock] | None = None
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, v: object) -> object:
        for i, block in enumerate(v if isinstance(v, list) else []):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in NON_TEXT_BLOCKS:
                raise ValueError(f"block {i} has type {kind!r}: this model takes text only "
                                 "(blocks of type 'text')")
        return v

    @property
    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(b.text for b in self.content)


class ThinkingBlock(Strict):
    """The model's earlier reasoning (another model's): not shown to this one."""

    type: Literal["thinking", "redacted_thinking"]


class OtherBlock(Strict):
    type: str

    @field_validator("type")
    @classmethod
    def _refused(cls, v: str) -> str:
        why = ("this model takes text only" if v in NON_TEXT_BLOCKS else
               "ffwd reads text, tool_use, tool_result and thinking blocks")
        raise ValueError(f"content blocks of type {v!r} are not supported: {why}")


def _block_tag(v: object) -> str | None:
    kind = v.get("type") if isinstance(v, dict) else None
    if not isinstance(kind, str):
        return None
    return {"text": "Text", "tool_use": "ToolUse", "tool_result": "ToolResult",
            "thinking": "Thinking", "redacted_thinking": "Thinking"}.get(kind, "Other")


Block = Annotated[
    Annotated[TextBlock, Tag("Text")] | Annotated[ToolUseBlock, Tag("ToolUse")]
    | Annotated[ToolResultBlock, Tag("ToolResult")] | Annotated[ThinkingBlock, Tag("Thinking")]
    | Annotated[SkipJsonSchema[OtherBlock], Tag("Other")],  # refused: not in the document
    Discriminator(_block_tag, custom_error_type="invalid_block",
                  custom_error_message="expected a content block: an object with a string "
                  "'type'"),
]


class InputMessage(Strict):
    """A turn; ``system`` ones are instructions given mid-conversation (Claude Code)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block]

    @model_validator(mode="after")
    def _blocks_of_the_role(self) -> InputMessage:
        home = {ToolResultBlock: "user", ToolUseBlock: "assistant"}
        for block in self.content if isinstance(self.content, list) else []:
            role = home.get(type(block))
            if role is not None and role != self.role:
                raise ValueError(f"{block.type} blocks belong in {role} messages")
        return self


class CustomTool(Strict):
    type: Literal["custom"] = "custom"
    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None


class OtherTool(Strict):
    """A tool Anthropic defines and runs (``web_search_20250305``, ...): skipped."""

    type: str
    name: str | None = None


def _tool_tag(v: object) -> str | None:
    if not isinstance(v, dict):
        return None
    kind = v.get("type", "custom")
    return "Custom" if kind == "custom" else "Other" if isinstance(kind, str) else None


Tool = Annotated[
    Annotated[CustomTool, Tag("Custom")] | Annotated[OtherTool, Tag("Other")],
    Discriminator(_tool_tag, custom_error_type="invalid_tool",
                  custom_error_message="expected a tool: an object with a name and an "
                  "input_schema"),
]


class ToolChoice(Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError('type "tool" needs the tool\'s "name"')
        return self


class OutputFormat(Strict):
    """``output_config.format``: the reply is JSON valid against ``schema``."""

    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")


class OutputConfig(Strict):
    effort: str | None = None  # accepted, not used
    format: OutputFormat | None = None

    def response_format(self) -> dict[str, Any] | None:
        """The OpenAI chat ``response_format`` the grammar reads (objects closed)."""
        if self.format is None:
            return None
        return {"type": "json_schema", "json_schema": {
            "name": "output", "schema": self.format.json_schema, "strict": True}}


class CountTokensRequest(Strict):
    """A Messages body, as ``count_tokens`` takes it: ``max_tokens`` optional, every field
    validated as `MessagesRequest` validates it (what one refuses, the other refuses)."""

    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[InputMessage], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: Annotated[list[Tool], Field(max_length=4 * 128)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict[str, Any] | None = None  # accepted, not used
    max_tokens: AtLeastOne | None = None
    stop_sequences: Annotated[list[StopText], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=1.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: Annotated[int, Field(ge=0, lt=2**31)] = 0
    stream: bool = False
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    output_config: OutputConfig | None = None
    seed: Seed | None = None  # not Anthropic's: as OpenAI's
    n: NotAParameter = None  # Chat Completions' choices: one message here
    ffwd: FfwdSettings | None = None

    @field_validator("stop_sequences", mode="before")
    @classmethod
    def _stops(cls, v: object) -> object:
        if isinstance(v, str):
            raise ValueError("expected an array of strings")
        return check_stops(v, MAX_STOP_SEQUENCES)

    @property
    def system_text(self) -> str:
        if self.system is None or isinstance(self.system, str):
            return self.system or ""
        return "\n".join(b.text for b in self.system)

    def check(self) -> None:
        """Each ``tool_result`` answers a ``tool_use`` of the assistant message before it
        (system turns between them aside), as Anthropic's API requires: a 400 naming it."""
        called: set[str] = set()  # the tool_use ids of the last assistant message
        for i, msg in enumerate(self.messages):
            if msg.role == "system":
                continue
            blocks = msg.content if isinstance(msg.content, list) else []
            for j, block in enumerate(blocks):
                if isinstance(block, ToolResultBlock) and block.tool_use_id not in called:
                    raise bad_request(
                        f"unexpected tool_use_id {block.tool_use_id!r} in a tool_result block: "
                        "each tool_result answers a tool_use block of the previous (assistant) "
                        "message", param=f"messages[{i}].content[{j}].tool_use_id")
            called = {b.id for b in blocks if isinstance(b, ToolUseBlock)}


class MessagesRequest(CountTokensRequest):
    max_tokens: AtLeastOne
