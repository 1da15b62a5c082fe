"""Render Hugging Face chat templates the way transformers does.

Public API
----------
``normalize_tools(tools) -> list[dict]``
    OpenAI tools (``{"type": "function", "function": {...}}``) or bare
    function objects in, OpenAI tools out (fresh copies). JSON Schema
    ``"dict"`` becomes ``"object"``; a missing parameter ``type`` or
    ``properties`` is filled in. Anything else that is not a usable schema is
    a ``ValueError`` naming the tool and the problem.
``render_chat(template, messages, tools=None, add_generation_prompt=True,
tokenizer=None, **extra) -> str``
    Jinja with the variables transformers provides (``messages``, ``tools``,
    ``add_generation_prompt``, ``bos_token``, ``eos_token``, the other special
    tokens, ``raise_exception``, ``strftime_now``, the ``tojson`` filter).
    Message content may be a string or a list of text parts; assistant
    ``tool_calls`` take OpenAI arguments as a JSON string or a dict (templates
    receive a dict). A template that raises gives a ``ValueError``.
``encode_chat(tokenizer, template, messages, tools=None) -> list[int]``
    The prompt ids: `render_chat` with the generation prompt, tokenized as a
    whole without added special tokens (the template writes its own). The
    server and ``ffwd generate`` both build prompts this way.
``encode_prompt(tokenizer, prompt, raw=False, fmt=None) -> list[int]``
    One user turn as the server renders it (``ffwd generate``), or raw text.
``resolve_template(tokenizer, fmt=None) -> (template, format)``
    The model's own template when it handles tools, else the builtin one for
    the given (or default) tool-call format.
``builtin_template(name) -> str``
    A template shipped in ``ffwd/templates/builtin/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ffwd.templates.builtin import builtin_template
from ffwd.templates.formats import FORMATS, detect_format

JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
DEFAULT_FORMAT = "hermes"


# --- tools -----------------------------------------------------------------


def normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Tools in OpenAI form with a clean ``parameters`` object schema.

    >>> normalize_tools([{"name": "f", "parameters": {"type": "dict"}}])[0]["function"]
    {'name': 'f', 'parameters': {'type': 'object', 'properties': {}}}
    """
    if tools is None:
        return []
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise ValueError(f"tools: expected a list of tool objects, got {type(tools).__name__}")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        fn = _function_of(tool, i)
        name = fn["name"]
        if name in seen:
            raise ValueError(f"tool {name!r}: the name is used by more than one tool")
        seen.add(name)
        fn["parameters"] = _object_schema(fn.get("parameters"), f"tool {name!r}: parameters")
        out.append({"type": "function", "function": fn})
    return out


def _function_of(tool: object, i: int) -> dict[str, Any]:
    if not isinstance(tool, Mapping):
        raise ValueError(f"tools[{i}]: expected an object, got {type(tool).__name__}")
    if "function" in tool:
        if tool.get("type", "function") != "function":
            raise ValueError(
                f"tools[{i}]: type {tool.get('type')!r} is not supported (expected 'function')"
            )
        fn = tool["function"]
        if not isinstance(fn, Mapping):
            raise ValueError(f"tools[{i}]: 'function' must be an object")
    else:
        fn = tool
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"tools[{i}]: 'name' must be a non-empty string, got {name!r}")
    return dict(fn)  # parameters are rebuilt by _object_schema


def _object_schema(schema: object, where: str) -> dict[str, Any]:
    if schema is None:
        return {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}: expected a JSON Schema object, got {type(schema).__name__}")
    out = _schema(schema, where)
    if out.get("type") != "object":
        raise ValueError(f"{where}: type {out.get('type')!r}, expected 'object'")
    props = out.setdefault("properties", {})
    required = out.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError(f"{where}: 'required' must be a list of property names")
    missing = [r for r in required if r not in props]
    if missing:
        raise ValueError(f"{where}: required {missing} not among the properties {list(props)}")
    return out


def _schema(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Copy of a JSON Schema with ``dict`` read as ``object``, checked recursively."""
    out = {k: list(v) if isinstance(v, list) else v for k, v in schema.items()}
    kind = out.get("type")
    if kind is None and "properties" in out:
        kind = out["type"] = "object"
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    kinds = ["object" if k == "dict" else k for k in kinds]
    for k in kinds:
        if k not in JSON_TYPES:
            raise ValueError(
                f"{where}: type {k!r} is not a JSON Schema type (expected one of {JSON_TYPES})"
            )
    if kinds:
        out["type"] = kinds if isinstance(kind, list) else kinds[0]
    if "object" in kinds or "properties" in out:
        props = out.get("properties", {})
        if not isinstance(props, Mapping):
            raise ValueError(f"{where}: 'properties' must be an object")
        fixed = {}
        for key, sub in props.items():
            if not isinstance(sub, Mapping):
                raise ValueError(f"{where}.{key}: expected a JSON Schema object")
            fixed[key] = _schema(sub, f"{where}.{key}")
        out["properties"] = fixed
    items = out.get("items")
    if isinstance(items, Mapping):
        out["items"] = _schema(items, f"{where}[]")
    return out


# --- rendering -------------------------------------------------------------


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body unchanged."""

    tags = {"generation"}  # noqa: RUF012 (the type is declared by jinja2.ext.Extension)

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters; transformers' does not.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@lru_cache(maxsize=32)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _Generation]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(
            f"chat template does not compile: {exc.message} (line {exc.lineno})"
        ) from exc


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    tokenizer: Any = None,
    **extra: Any,
) -> str:
    """The prompt text for `messages` (see the module docstring)."""
    variables: dict[str, Any] = {}
    if tokenizer is not None:
        for attr in ("bos_token", "eos_token", "unk_token", "pad_token"):
            value = getattr(tokenizer, attr, None)
            if isinstance(value, str):
                variables[attr] = value
    variables.update(
        messages=[_message(m, i) for i, m in enumerate(messages)],
        tools=normalize_tools(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
    )
    variables.update(extra)
    try:
        return _compile(template).render(**variables)
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template raised: {exc.message or exc}") from exc
    except (TypeError, KeyError, AttributeError, IndexError) as exc:
        raise ValueError(f"chat template failed on these messages: {exc!r}") from exc


def encode_chat(
    tokenizer: Any,
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """The prompt ids for `messages` (see the module docstring)."""
    text = render_chat(template, messages, tools, True, tokenizer)
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]


def encode_prompt(
    tokenizer: Any, prompt: str, raw: bool = False, fmt: str | None = None
) -> list[int]:
    """One prompt as ids: `prompt` as a user turn rendered exactly as the server renders
    it (the template `resolve_template` picks for `fmt`), or, when `raw`, as it is."""
    if raw:
        return [int(i) for i in tokenizer.encode(prompt, add_special_tokens=False)]
    template, _ = resolve_template(tokenizer, fmt)
    return encode_chat(tokenizer, template, [{"role": "user", "content": prompt}])


def _message(message: Mapping[str, Any], i: int) -> dict[str, Any]:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ValueError(f"messages[{i}]: expected an object with a string 'role'")
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "".join(_text_part(part, i) for part in content)
    elif content is not None and not isinstance(content, str):
        raise ValueError(f"messages[{i}].content: expected a string or a list of text parts")
    if out.get("tool_calls"):
        out["tool_calls"] = [_tool_call(c, i, j) for j, c in enumerate(out["tool_calls"])]
    return out


def _text_part(part: object, i: int) -> str:
    if (
        isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ):
        return str(part["text"])
    kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
    raise ValueError(f"messages[{i}].content: part of type {kind!r} is not supported (only 'text')")


def _tool_call(call: object, i: int, j: int) -> dict[str, Any]:
    where = f"messages[{i}].tool_calls[{j}]"
    if not isinstance(call, Mapping):
        raise ValueError(f"{where}: expected an object")
    fn = call.get("function", call)
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ValueError(f"{where}: expected {{'function': {{'name': ..., 'arguments': ...}}}}")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}.arguments: not valid JSON ({exc.msg})") from exc
    if not isinstance(args, Mapping):
        raise ValueError(f"{where}.arguments: expected a JSON object")
    function = {**fn, "arguments": dict(args)}
    return {**call, "type": "function", "function": function, **function}


# --- choosing a template -----------------------------------------------------

_TOOLS_VAR = re.compile(r"\btools\b")


def model_template(tokenizer: Any) -> str | None:
    """The tokenizer's own chat template (its ``tool_use`` variant when named)."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, Mapping):
        tpl = tpl.get("tool_use") or tpl.get("default")
    return tpl if isinstance(tpl, str) and tpl.strip() else None


def handles_tools(template: str) -> bool:
    """Whether a template reads the ``tools`` variable at all."""
    return bool(_TOOLS_VAR.search(template))


def resolve_template(tokenizer: Any, fmt: str | None = None) -> tuple[str, str]:
    """(template text, format name) for this tokenizer.

    The model's own template wins when it handles tools and its format is the
    requested one (or none was requested). Otherwise the builtin for `fmt`
    (default ``hermes``); tokenizers with Gemma turn tokens get the
    Gemma-markup variant of the hermes builtin.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"tool-call format {fmt!r}: expected one of {', '.join(FORMATS)}")
    own = model_template(tokenizer)
    if own is not None and handles_tools(own):
        detected = detect_format(own) if fmt is None else _try_detect(own)
        if fmt is None or detected == fmt:
            return own, detected or DEFAULT_FORMAT
    name = fmt or DEFAULT_FORMAT
    if name == "hermes" and _single_token(tokenizer, "<start_of_turn>"):
        return builtin_template("gemma"), name
    return builtin_template(name), name


def _try_detect(template: str) -> str | None:
    try:
        return detect_format(template)
    except ValueError:
        return None


def _single_token(tokenizer: Any, text: str) -> bool:
    try:
        return len(tokenizer.encode(text, add_special_tokens=False)) == 1
    except (AttributeError, TypeError):
        return False
