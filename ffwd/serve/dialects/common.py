"""What the dialects share: ids, strict models, fields an API does not have, stop
strings, tool choices checked against the tools, volatile prompt blocks, the output cap in
a usage, OpenAI's reasoning effort as a `Reasoning`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.json_schema import JsonDict
from pydantic_core import PydanticCustomError

from ffwd.engine.events import GenerationResult
from ffwd.serve.errors import APIError, bad_request
from ffwd.serve.protocol import MAX_STOP_CHARS, MAX_TOOLS, NON_TEXT_PARTS
from ffwd.serve.request import Reasoning

__all__ = ["MAX_STOP_CHARS", "MAX_TOOLS", "NON_TEXT_PARTS", "Strict"]

# Lines that change on every request and so would defeat the prompt cache: Claude Code
# puts a billing attribution block (`x-anthropic-billing-header: cc_version=...; cch=...;`)
# at the top of its system prompt. They are dropped before the prompt is rendered.
VOLATILE_LINE = re.compile(r"^[ \t]*x-anthropic-billing-header:[^\n]*(\n|$)",
                           re.IGNORECASE | re.MULTILINE)


def new_id(prefix: str) -> str:
    """A fresh object id: `prefix` and 24 random hex digits."""
    return prefix + uuid.uuid4().hex[:24]


class Strict(BaseModel):
    """Request models: strict JSON types, finite numbers, unknown fields ignored."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


def _not_a_parameter(value: object) -> object:
    raise PydanticCustomError("extra_forbidden", "Extra inputs are not permitted")


def _never(schema: JsonDict) -> None:
    """The document's word for a field no value of is valid (no default either)."""
    schema.pop("default", None)
    schema.update({"not": {}, "description": "not a parameter of this API: omit"})


# A field the API does not have, refused as its server refuses it (an unknown parameter)
# where ignoring it would silently change the reply: `n` asks Chat Completions for n
# choices, and the Responses and Messages APIs return one reply and have no `n`. The
# served document says so: no value is valid.
NotAParameter = Annotated[Any, BeforeValidator(_not_a_parameter),
                         Field(json_schema_extra=_never)]

def strip_volatile(text: str) -> str:
    """`text` without the lines that change per request (see `VOLATILE_LINE`).

    >>> strip_volatile("x-anthropic-billing-header: cc_version=2.1; cch=9f3;\\nYou are...")
    'You are...'
    """
    return VOLATILE_LINE.sub("", text)


def capped(res: GenerationResult | None) -> dict[str, Any]:
    """What a usage adds when the server lowered the request's output limit (no API has
    a field of its own for it): ``{"ffwd": {"max_tokens_asked", "max_tokens",
    "capped_by"}}``; else nothing."""
    return {"ffwd": res.cap.as_dict()} if res is not None and res.cap is not None else {}


def check_stops(value: object, limit: int) -> object:
    """A stop list's rules (a string or up to `limit` strings of 1..MAX_STOP_CHARS)."""
    if value is None:
        return value
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ValueError(f"expected a string or an array of up to {limit} strings")
    if len(stops) > limit:
        raise ValueError(f"at most {limit} stop sequences are accepted, got {len(stops)}")
    if any(s == "" or len(s) > MAX_STOP_CHARS for s in stops):
        raise ValueError(f"a stop sequence must have 1 to {MAX_STOP_CHARS} characters")
    return value


def function_tool(name: str, parameters: dict[str, Any] | None, description: str | None,
                  strict: bool | None) -> dict[str, Any]:
    """A tool in OpenAI chat form (what the template and the grammar read)."""
    fn: dict[str, Any] = {"name": name, "parameters": parameters}
    fn |= {"description": description} if description is not None else {}
    fn |= {"strict": strict} if strict is not None else {}
    return {"type": "function", "function": fn}


def at_most_max_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(tools) > MAX_TOOLS:
        raise bad_request(f"at most {MAX_TOOLS} function tools are accepted, got {len(tools)}",
                          param="tools")
    return tools


def function_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def check_choice(choice: str | Mapping[str, Any], tools: list[dict[str, Any]],
                 param: str, named: str) -> None:
    """A forced choice needs tools; a named one, a tool of that name (`named` is how the
    API spells "a tool": "function", "tool")."""
    if choice in ("none", "auto"):
        return
    names = function_names(tools)
    if not names:
        raise bad_request(f"{param} requires tools, and the request lists no {named} tools",
                          param=param)
    if isinstance(choice, Mapping):
        name = choice["function"]["name"]
        if name not in names:
            raise bad_request(
                f"{param} names {named} {name!r}, which is not in tools (tools: "
                f"{', '.join(sorted(names))})", param=param, code="unknown_tool")


def openai_parallel(choice: str | Mapping[str, Any], parallel_tool_calls: bool) -> bool:
    """Whether more than one call may be made under OpenAI's rules: a named function is
    exactly one call (the model calls that function), ``parallel_tool_calls`` governs
    ``auto`` and ``required``."""
    return parallel_tool_calls and not isinstance(choice, Mapping)


def not_found(message: str, param: str | None, code: str) -> APIError:
    return APIError(404, message, type="invalid_request_error", param=param, code=code)


def refused(param: str, message: str) -> APIError:
    return bad_request(f"{param}: {message}", param=param, code="unsupported_parameter")


def effort_reasoning(effort: str | None) -> Reasoning | None:
    """OpenAI's reasoning effort as the request's `Reasoning` (``none``: no reasoning).

    >>> effort_reasoning("none")
    Reasoning(on=False, effort='none', budget=None)
    """
    if effort is None:
        return None
    return Reasoning(on=False if effort == "none" else None, effort=effort)
