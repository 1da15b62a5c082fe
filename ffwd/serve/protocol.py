"""Request bodies of the OpenAI-compatible API, validated into typed objects.

`ChatCompletionRequest` and `CompletionRequest` (its prompt rules in
`dialects.completions_models`, over the `SamplingFields` here) are the only shapes the
handlers see: a malformed field is a 400 naming the parameter (see
`errors.from_validation_error`), unknown fields are ignored as OpenAI does.
Types are strict (``true`` is not an integer, ``"10"`` is not a number) and
numbers must be finite and in range. The same models are the request bodies
of the served OpenAPI document.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict

from ffwd.config import REQUEST_FILL_TYPES, FillMode
from ffwd.serve.errors import bad_request

Role = Literal["system", "developer", "user", "assistant", "tool"]
# OpenAI's reasoning efforts (`reasoning_effort`, Responses' `reasoning.effort`).
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
MAX_STOP_CHARS = 1000  # a stop string is matched against every token's text
MAX_TOP_LOGPROBS = 20
MAX_TOOLS = 128  # as OpenAI; each request's tools are compiled into rows (CPU time)
ONE_CHOICE = "ffwd returns exactly one choice per request"  # why n > 1 and more prompts fail
# Content part types of other modalities: refused with a message that says why.
NON_TEXT_PARTS = ("image_url", "input_audio", "file", "image", "input_image", "audio")


def json_integer(v: object) -> object:
    """JSON has one number type: 10.0 is the integer 10 (true and "10" are not)."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


# (Constraints before the validator, so the served document states them as JSON Schema.)
Int = Annotated[int, BeforeValidator(json_integer)]
AtLeastOne = Annotated[int, Field(ge=1), BeforeValidator(json_integer)]
TopCount = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS), BeforeValidator(json_integer)]
Seed = Annotated[int, Field(ge=-(2**63), lt=2**64), BeforeValidator(json_integer)]
StopText = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]
MAX_METADATA = 16  # key-value pairs, as OpenAI
# OpenAI's `metadata`: at most 16 pairs, keys of up to 64 characters, values of up to 512.
Metadata = Annotated[dict[Annotated[str, Field(max_length=64)],
                          Annotated[str, Field(max_length=512)]], Field(max_length=MAX_METADATA)]
# What the served document says of the fields whose rules JSON Schema can state.
ONE: JsonDict = {"minimum": 1, "maximum": 1}  # n and best_of: one completion per request
TOKEN_ID_KEYS: JsonDict = {"propertyNames": {"pattern": "^[0-9]{1,10}$"},
                           "additionalProperties": {"minimum": -100, "maximum": 100}}
REFUSED: JsonDict = {"maxLength": 0, "description": "not supported: omit, null or empty"}
MESSAGE_RULES: JsonDict = {"allOf": [
    {  # content required, no tool_calls
        "if": {"properties": {"role": {"not": {"const": "assistant"}}}, "required": ["role"]},
        "then": {"required": ["content"], "properties": {
            "content": {"not": {"type": "null"}},
            "tool_calls": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}}},
    {  # a tool message answers a call: its id is required, as OpenAI's document says
        "if": {"properties": {"role": {"const": "tool"}}, "required": ["role"]},
        "then": {"required": ["tool_call_id"],
                 "properties": {"tool_call_id": {"type": "string"}}}},
]}
TOOL_SCHEMA: JsonDict = {"items": {
    "type": "object", "required": ["type", "function"], "properties": {
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
            "parameters": {"type": "object", "properties": {"type": {"const": "object"},
                           "properties": {"type": "object", "additionalProperties": {
                               "type": "object", "properties": {"type": {"enum": [
                                   "string", "integer", "number", "boolean"]}}}}}}}}}}}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class TextPart(_Model):
    type: Literal["text"]
    text: str


class FunctionCall(_Model):
    name: str
    arguments: str = "{}"  # a JSON text, as the model wrote it (an object is a type error)

    @field_validator("arguments")
    @classmethod
    def _arguments_json(cls, v: str) -> str:
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
    model_config = ConfigDict(json_schema_extra=MESSAGE_RULES)

    role: Role
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None  # an assistant's earlier reasoning (llama.cpp)
    reasoning: str | None = None  # the same, as vLLM names it

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, v: object) -> object:
        if v is None or isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise ValueError("expected a string or an array of text parts")
        for i, part in enumerate(v):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in NON_TEXT_PARTS:
                raise ValueError(f"part {i} has type {kind!r}: this model takes text only "
                                 "(parts of type 'text')")
            if kind != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"part {i}: expected {{\"type\": \"text\", \"text\": \"...\"}}")
        return v

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
        """The message as a chat template expects it (content as one string; an assistant's
        earlier reasoning, either spelling, as ``reasoning_content``)."""
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
        thought = self.reasoning_content if self.reasoning_content is not None else self.reasoning
        if thought is not None and self.role == "assistant":
            out["reasoning_content"] = thought
        return out


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Model):
    include_usage: bool = False


class JsonSchemaFormat(_Model):
    """OpenAI's ``response_format.json_schema``: the schema the content must match
    (optional, as in OpenAI's API: without one, the content is any JSON object)."""

    name: str = Field(default="response", max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(
        default=None, alias="schema",
        description="The JSON Schema the content matches; omitted: any JSON object")
    strict: bool | None = None


class ResponseFormat(_Model):
    """``text`` (no constraint), ``json_object`` (any JSON object) or ``json_schema``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('type "json_schema" needs "json_schema": {"name": ..., '
                             '"schema": {...}} (schema optional: any JSON object)')
        return self


class FfwdSettings(BaseModel):
    """The request's ``ffwd`` object: fill overrides and, apart from them, ``tokens``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    fill: FillMode | None = None
    max_span: Int | None = None
    append_chunk_size: Int | None = None
    k: Int | None = None
    candidates: Int | None = None
    index_max: Int | None = None
    trace: bool | None = None
    grammar: bool | None = None
    recall: bool | None = None
    tokens: bool | None = None  # list each token's id and origin: not a fill setting

    @field_validator("trace", mode="before")
    @classmethod
    def _switch_only(cls, v: object) -> object:
        if v is not None and not isinstance(v, bool):
            raise ValueError("expected true or false: a request cannot choose a trace file "
                             "(the destination is the server's FFWD_FILL_TRACE)")
        return v

    def fill_overrides(self) -> dict[str, Any]:  # for FillConfig.for_request: never tokens
        return self.model_dump(include=set(REQUEST_FILL_TYPES), exclude_none=True)


class SamplingFields(_Model):
    """Fields shared by both endpoints."""

    model: str = "default"
    max_tokens: AtLeastOne | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: Annotated[int, Field(ge=0, lt=2**31), BeforeValidator(json_integer)] = 0
    min_p: float = Field(default=0.0, ge=0.0, lt=1.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, ge=0.01, le=10.0)
    seed: Seed | None = None
    stop: StopText | Annotated[list[StopText], Field(max_length=4)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = Field(default=None, json_schema_extra=TOKEN_ID_KEYS)
    n: Int = Field(default=1, json_schema_extra=ONE)
    user: str | None = None
    response_format: ResponseFormat | None = None
    ffwd: FfwdSettings | None = None

    @field_validator("n")
    @classmethod
    def _only_one_choice(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"n={v} is not supported: {ONE_CHOICE} (n=1)")
        return v

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, v: object) -> object:
        stops = [v] if isinstance(v, str) else v
        if v is None:
            return v
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise ValueError("expected a string or an array of up to 4 strings")
        if len(stops) > 4:
            raise ValueError(f"at most 4 stop sequences are accepted, got {len(stops)}")
        if any(s == "" or len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"a stop sequence must have 1 to {MAX_STOP_CHARS} characters")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (v or {}).items():
            if not (key.isdigit() and key.isascii() and len(key) <= 10):
                raise ValueError(f"key {key[:20]!r} is not a token id (a decimal string)")
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
    tools: Annotated[list[dict[str, Any]], Field(max_length=MAX_TOOLS)] | None = Field(
        default=None, json_schema_extra=TOOL_SCHEMA)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    max_completion_tokens: AtLeastOne | None = None
    logprobs: bool = False
    top_logprobs: TopCount | None = None
    metadata: Metadata | None = None  # accepted, kept nowhere (the server stores no completion)
    reasoning_effort: Effort | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # as llama.cpp's server and vLLM

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _choice(cls, v: object) -> object:
        if not (v is None or v in ("none", "auto", "required") or isinstance(v, dict)):
            raise ValueError("expected 'none', 'auto', 'required' or "
                             '{"type": "function", "function": {"name": "..."}}')
        return v

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def logprob_count(self) -> int | None:
        """Alternatives to report per token (0: the chosen token only); None: no logprobs."""
        return (self.top_logprobs or 0) if self.logprobs else None

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
        if self.top_logprobs is not None and not self.logprobs:
            raise bad_request("top_logprobs requires logprobs: true", param="top_logprobs")
        for i, m in enumerate(self.messages):
            if m.role == "tool" and m.tool_call_id is None:
                raise bad_request(f"'messages[{i}].tool_call_id': is required: a tool message "
                                  "answers the call with that id",
                                  param=f"messages[{i}].tool_call_id",
                                  code="missing_required_parameter")
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


def _tool_name(tool: dict[str, Any]) -> str | None:
    fn = tool.get("function") if tool.get("type") == "function" else tool
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None
