"""Request bodies of the OpenAI-compatible API, validated into typed objects.

`ChatCompletionRequest` and `CompletionRequest` are the only shapes the
handlers see: a malformed field is a 400 naming the parameter (see
`errors.from_validation_error`), unknown fields are ignored as OpenAI does.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ffwd.serve.errors import bad_request

Role = Literal["system", "developer", "user", "assistant", "tool"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Model):
    type: Literal["text"]
    text: str


class FunctionCall(_Model):
    name: str
    arguments: str | dict[str, Any] = "{}"

    @field_validator("arguments")
    @classmethod
    def _arguments_json(cls, v: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(v, str):
            try:
                json.loads(v or "{}")
            except json.JSONDecodeError as exc:
                raise ValueError(f"function.arguments is not valid JSON: {exc.msg}") from None
        return v


class ToolCall(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Model):
    role: Role
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages may carry tool_calls, not {self.role!r}")
        if self.content is None and not self.tool_calls and self.role != "assistant":
            raise ValueError(f"a {self.role!r} message needs content")
        return self

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)

    def as_template_message(self) -> dict[str, Any]:
        """The message as a chat template expects it (content as one string)."""
        # "developer" is OpenAI's newer name for the system role; templates know "system".
        role = "system" if self.role == "developer" else self.role
        out: dict[str, Any] = {"role": role, "content": self.text}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.function.name,
                        "arguments": c.function.arguments,
                    },
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Model):
    include_usage: bool = False


class SamplingFields(_Model):
    """Fields shared by both endpoints."""

    model: str = "default"
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    n: int = 1
    user: str | None = None
    ffwd: dict[str, Any] | None = None

    @field_validator("n")
    @classmethod
    def _only_one_choice(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"n={v} is not supported: ffwd returns exactly one choice (n=1)")
        return v

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 4:
            raise ValueError(f"at most 4 stop sequences are accepted, got {len(stops)}")
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (v or {}).items():
            if not key.strip().isdigit():
                raise ValueError(f"logit_bias key {key!r} is not a token id")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias[{key}]={bias} is outside [-100, 100]")
        return v

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def logit_bias_ids(self) -> dict[int, float]:
        return {int(k): b for k, b in (self.logit_bias or {}).items()}


class ChatCompletionRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def tool_choice_value(self) -> str | dict[str, Any]:
        """`auto` when tools are given and nothing is said, else as given."""
        tc = self.tool_choice
        if tc is None:
            return "auto" if self.tools else "none"
        if isinstance(tc, NamedToolChoice):
            return {"type": "function", "function": {"name": tc.function.name}}
        return tc

    def check(self) -> None:
        """Cross-field rules, as 400s that name the parameter."""
        tc = self.tool_choice
        if tc not in (None, "none", "auto") and not self.tools:
            raise bad_request(
                "tool_choice requires tools, and the request lists none", param="tool_choice"
            )
        if isinstance(tc, NamedToolChoice):
            names = sorted({n for n in map(_tool_name, self.tools or []) if n})
            if tc.function.name not in names:
                raise bad_request(
                    f"tool_choice names function {tc.function.name!r}, which is not in tools "
                    f"(tools: {', '.join(names) or 'none'})",
                    param="tool_choice",
                    code="unknown_tool",
                )


class CompletionRequest(SamplingFields):
    prompt: str | list[str]
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and len(v) != 1:
            raise ValueError(f"exactly one prompt is accepted, got {len(v)}")
        return v

    @property
    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    def check(self) -> None:
        """Nothing crosses fields here; present for symmetry with chat."""


def _tool_name(tool: dict[str, Any]) -> str | None:
    fn = tool.get("function") if tool.get("type") == "function" else tool
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None
