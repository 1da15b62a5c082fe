"""qwen_xml: Qwen3-Coder / Qwen3.5 style XML tool calls::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are raw text. The parser turns them into JSON arguments using the
tools' schemas when it has them (``"5"`` stays a string for a string
property, becomes 5 for an integer one); without a schema, text that parses
as JSON is taken as JSON, ``True``/``False`` (how the template writes
booleans) as booleans, and anything else as a string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.templates.formats.base import (
    ArgLayout,
    CallLayout,
    ParseState,
    ToolCall,
    ToolCallDelta,
    ToolFormat,
)
from ffwd.templates.formats.marker import MarkerParser, held_suffix

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FUNCTION = "<function="
FUNCTION_END = "</function>"
PARAMETER = "<parameter="
PARAMETER_END = "</parameter>"
VALUE_END = "\n" + PARAMETER_END


def convert_value(text: str, schema: Mapping[str, Any] | None) -> Any:
    """A parameter's raw text as a JSON value.

    >>> convert_value("5", {"type": "integer"}), convert_value("5", {"type": "string"})
    (5, '5')
    >>> convert_value("True", {"type": "boolean"}), convert_value("Paris", None)
    (True, 'Paris')
    """
    kind = schema.get("type") if schema else None
    if kind == "string":
        return text
    if kind in ("boolean", None) and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class QwenXmlParser(MarkerParser):
    """Incremental parser for one message of XML tool calls."""

    open_marker = OPEN

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self._schemas = _property_schemas(tools)
        super().__init__()

    def _reset_call(self) -> None:
        super()._reset_call()
        self._tag = ""
        self._buf: list[str] = []
        self._name: str | None = None
        self._tool: str | None = None
        self._key: str | None = None
        self._used: list[str] = []
        self._args: list[str] = []  # argument fragments sent so far

    @property
    def state(self) -> ParseState:
        # Inside a value, what may be the start of its closing tag matters.
        ending = ""
        if self._mode == "value":
            text = "".join(self._buf[-len(VALUE_END) :])
            ending = text[len(text) - held_suffix(text, VALUE_END) :]
        where = (self._mode, self._tag, self._held, self._after_call, ending)
        name = self._name if self._mode in ("fname", "body") and not self._used else None
        if self._mode == "body" and self._tag == PARAMETER:
            name = None
        return ParseState(where, self._tool, name, self._key, tuple(self._used))

    def _call_complete(self) -> bool:
        return self._mode == "fend"

    def _finish_markup(self) -> None:
        if self._mode == "fend":  # the function is complete: a missing closing tag is forgiven
            self._close_wrapper()
        else:
            self._fail()

    # --- markup ---------------------------------------------------------------
    def _markup(self, text: str) -> str | None:
        for i, c in enumerate(text):
            if self._mode != "fend":
                self._raw.append(c)
            handler = getattr(self, "_" + self._mode)
            rest = handler(c)
            if rest is not None:
                return rest + text[i + 1 :]
            if self._mode == "content":
                return text[i + 1 :]
        return None

    def _tag_char(self, c: str, *tags: str) -> str | None:
        """Grow the pending tag; the tag completed, "" while pending, None on mismatch."""
        if not self._tag and c.isspace():
            return ""
        self._tag += c
        for tag in tags:
            if tag == self._tag:
                self._tag = ""
                return tag
        return "" if any(t.startswith(self._tag) for t in tags) else None

    def _open(self, c: str) -> None:
        got = self._tag_char(c, FUNCTION)
        if got is None:
            self._fail()
        elif got:
            self._mode, self._buf, self._name = "fname", [], ""

    def _fname(self, c: str) -> None:
        if c != ">":
            self._buf.append(c)
            self._name = "".join(self._buf)
            return
        name = self._name.strip() if self._name else ""
        if not name:
            self._fail()
            return
        self._tool = self._name = name
        self._out.append(ToolCallDelta(len(self.calls), name=name))
        self._mode = "body"

    def _body(self, c: str) -> None:
        got = self._tag_char(c, PARAMETER, FUNCTION_END)
        if got is None:
            self._fail()
        elif got == PARAMETER:
            self._mode, self._buf, self._key = "pkey", [], ""
        elif got == FUNCTION_END:
            self._send("{}" if not self._args else "}")
            self.calls.append(ToolCall(self._tool or "", "".join(self._args)))
            self._mode = "fend"

    def _pkey(self, c: str) -> None:
        if c != ">":
            self._buf.append(c)
            self._key = "".join(self._buf)
            return
        key = (self._key or "").strip()
        if not key:
            self._fail()
            return
        self._used.append(key)
        self._key, self._buf = None, []
        self._mode = "value"

    def _value(self, c: str) -> None:
        self._buf.append(c)
        if c != ">" or len(self._buf) < len(PARAMETER_END):
            return
        text = "".join(self._buf)
        if not text.endswith(PARAMETER_END):
            return
        value = text[: -len(PARAMETER_END)]
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        key = self._used[-1]
        schema = self._schemas.get(self._tool or "", {}).get(key)
        piece = json.dumps(key, ensure_ascii=False) + ": "
        piece += json.dumps(convert_value(value, schema), ensure_ascii=False)
        self._send(("{" if not self._args else ", ") + piece)
        self._buf = []
        self._mode = "body"

    def _fend(self, c: str) -> str | None:
        got = self._tag_char(c, CLOSE)
        if got is None:  # no closing tag: keep the call, read on as content
            rest = self._tag
            self._close_wrapper()
            return rest
        if got:
            self._close_wrapper()
            return ""
        return None

    def _send(self, fragment: str) -> None:
        self._args.append(fragment)
        self._out.append(ToolCallDelta(len(self.calls), arguments=fragment))


def _property_schemas(
    tools: Sequence[Mapping[str, Any]] | None,
) -> dict[str, dict[str, Mapping[str, Any]]]:
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for tool in tools or ():
        fn = tool.get("function", tool)
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[str(fn.get("name"))] = dict(props)
    return out


def locate(text: str, start: int, name: str, args: Mapping[str, Any]) -> CallLayout | None:
    """Find the parts of the rendered call of `name` that begins at or after `start`.

    >>> t = "<tool_call>\\n<function=f>\\n<parameter=a>\\nx\\n</parameter>\\n</function>"
    >>> lay = locate(t, 0, "f", {"a": "x"})
    >>> t[slice(*lay.name)], t[slice(*lay.args[0].value_span)], t[lay.close - 1 : lay.close + 1]
    ('f', 'x', '</')
    """
    ms = text.find(OPEN, start)
    fs = text.find(FUNCTION, ms)
    if ms < 0 or fs < 0:
        return None
    ns = fs + len(FUNCTION)
    ne = ns + len(name)
    if text[ns:ne] != name or text[ne : ne + 1] != ">":
        return None
    cursor = ne
    layouts: list[ArgLayout] = []
    for key in args:
        ps = text.find(PARAMETER + key + ">", cursor)
        if ps < 0:
            return None
        ks = ps + len(PARAMETER)
        vs = ks + len(key) + 1
        vs += text.startswith("\n", vs)
        pe = text.find(PARAMETER_END, vs)
        if pe < 0:
            return None
        ve = pe - 1 if text[pe - 1] == "\n" and pe - 1 >= vs else pe
        lead = ps + 1 if layouts else -1
        layouts.append(ArgLayout(key, (ks, ks + len(key)), (vs, ve), lead, pe, pe + 1))
        cursor = pe + len(PARAMETER_END)
    fe = text.find(FUNCTION_END, cursor)
    if fe < 0:
        return None
    return CallLayout((ms, ms + len(OPEN)), (ns, ne), tuple(layouts), fe + 1)


FORMAT = ToolFormat(
    name="qwen_xml",
    open_marker=OPEN,
    builtin="qwen_xml",
    signatures=(FUNCTION, PARAMETER),
    parser=QwenXmlParser,
    locate=locate,
)
