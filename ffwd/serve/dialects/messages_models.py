"""Request bodies of the Anthropic Messages API (``POST /v1/messages`` and
``/v1/messages/count_tokens``), validated.

Content blocks and tools are tagged unions on ``type`` (capitalised tags, so
an error names the field as the API does: ``messages[1].content[0].input``).
An assistant's ``thinking`` blocks are its earlier reasoning (``redacted_thinking``
ones, encrypted by Anthropic, are dropped); the ``thinking`` setting (its
``budget_tokens`` at least 1024 and below ``max_tokens``, as Anthropic documents)
and ``output_config.effort`` are the request's `Reasoning`;
image, document and server-tool blocks are refused (the model reads text), and
so are ``n`` and a ``tool_result`` that answers no ``tool_use`` of the assistant
turn before it (`CountTokensRequest.check`), as Anthropic's API refuses them.
``count_tokens`` takes the same body, its fields validated the same way, with
``max_tokens`` optional.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from ffwd.serve.dialects.common import NotAParameter, Strict, check_stops
from ffwd.serve.errors import bad_request
from ffwd.serve.protocol import AtLeastOne, FfwdSettings, Seed, StopText, json_integer
from ffwd.serve.request import Reasoning

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
    """An assistant turn's earlier reasoning: that turn's ``reasoning_content``."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None  # Anthropic's proof that it wrote the block: not checked


class RedactedThinkingBlock(Strict):
    """Reasoning Anthropic encrypted: nothing the model could read, dropped."""

    type: Literal["redacted_thinking"]
    data: str | None = None


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
            "thinking": "Thinking", "redacted_thinking": "Redacted"}.get(kind, "Other")


Block = Annotated[
    Annotated[TextBlock, Tag("Text")] | Annotated[ToolUseBlock, Tag("ToolUse")]
    | Annotated[ToolResultBlock, Tag("ToolResult")] | Annotated[ThinkingBlock, Tag("Thinking")]
    | Annotated[RedactedThinkingBlock, Tag("Redacted")]
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
        home = {ToolResultBlock: "user", ToolUseBlock: "assistant",
                ThinkingBlock: "assistant", RedactedThinkingBlock: "assistant"}
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
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None  # the Reasoning's
    format: OutputFormat | None = None

    def response_format(self) -> dict[str, Any] | None:
        """The OpenAI chat ``response_format`` the grammar reads (objects closed)."""
        if self.format is None:
            return None
        return {"type": "json_schema", "json_schema": {
            "name": "output", "schema": self.format.json_schema, "strict": True}}


MIN_BUDGET = 1024  # Anthropic's least budget_tokens
Display = Literal["summarized", "omitted"]  # how Claude shows its thinking: not used
THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")


class ThinkingEnabled(Strict):
    """``{"type": "enabled", "budget_tokens": N}``: reason, at most N ids of it."""

    type: Literal["enabled"]
    budget_tokens: Annotated[int, Field(ge=MIN_BUDGET), BeforeValidator(json_integer)]
    display: Display | None = None


class ThinkingSwitch(Strict):
    """``disabled`` (no reasoning), ``adaptive`` and ``between_tools`` (reasoning on, as
    much as the model wants)."""

    type: Literal["disabled", "adaptive", "between_tools"]
    display: Display | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _known(cls, v: object) -> object:
        if v not in THINKING_TYPES:
            raise ValueError("expected " + ", ".join(repr(t) for t in THINKING_TYPES))
        return v


def _thinking_tag(v: object) -> str | None:
    kind = v.get("type") if isinstance(v, dict) else None
    return None if not isinstance(kind, str) else "Enabled" if kind == "enabled" else "Switch"


Thinking = Annotated[
    Annotated[ThinkingEnabled, Tag("Enabled")] | Annotated[ThinkingSwitch, Tag("Switch")],
    Discriminator(_thinking_tag, custom_error_type="invalid_thinking",
                  custom_error_message='expected {"type": "enabled", "budget_tokens": N} or '
                  '{"type": "disabled"}'),
]


class CountTokensRequest(Strict):
    """A Messages body, as ``count_tokens`` takes it: ``max_tokens`` optional, every field
    validated as `MessagesRequest` validates it (what one refuses, the other refuses)."""

    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[InputMessage], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: Annotated[list[Tool], Field(max_length=4 * 128)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
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

    @property
    def reasoning(self) -> Reasoning | None:
        """``thinking`` and ``output_config.effort`` as the request's `Reasoning`."""
        effort = self.output_config.effort if self.output_config else None
        t = self.thinking
        if t is None:
            return None if effort is None else Reasoning(effort=effort)
        budget = t.budget_tokens if isinstance(t, ThinkingEnabled) else None
        return Reasoning(on=t.type != "disabled", effort=effort, budget=budget)

    def check(self) -> None:
        """``thinking.budget_tokens`` is below ``max_tokens`` (when given), and each
        ``tool_result`` answers a ``tool_use`` of the assistant message before it (system
        turns between them aside), as Anthropic's API requires: a 400 naming it."""
        t, limit = self.thinking, self.max_tokens
        if isinstance(t, ThinkingEnabled) and limit is not None and t.budget_tokens >= limit:
            raise bad_request(
                f"'thinking.budget_tokens': {t.budget_tokens} must be less than max_tokens "
                f"({limit}): the reasoning is part of the output", param="thinking.budget_tokens")
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
