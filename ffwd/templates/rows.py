"""Compile a request's strict rows from whole template renderings.

Public API
----------
``compile_tools(tokenizer, template, tools, tool_choice="auto", eos_ids=(),
fmt=None, echo=None) -> CompiledTools``
    ``.plan`` is the request's `FillPlan`, ``.format`` its `ToolFormat`, and
    ``.new_context()`` returns a fresh `StrictFillContext` for one request
    (pass it to `FillSession(strict_context=...)`).
``compile_plan(...) -> FillPlan``
    The same, plan only.
``default_eos_ids(tokenizer) -> tuple[int, ...]``
    The tokenizer's EOS id plus the single-token turn ends it knows.

How rows are found
------------------
Each called tool is rendered as the assistant turn of a one-message
conversation several times (its keys rotated, values of its schema's type
drawn from a few sentinels per type), each rendering is tokenized as a
whole, and only runs that are identical across the renderings become rows:
a token that merges with a name or a value differs between renderings and so
never enters a row. The format's ``locate`` finds the character spans of the
marker, name, keys and values in each rendering; token offsets map them to
token positions. Rows:

* scaffold: the marker's tokens -> what follows up to where tools differ
  (with one tool: the name and the markup up to the first argument);
  ``required``/named: the prompt's last tokens plus the first assistant
  token -> the rest of that run.
* name: the name tokens written so far, once unique among the tools -> the
  rest of the name and the markup up to the first argument.
* key: a key's first tokens, once unique among the tool's unused keys ->
  the rest of the key and its separator; and after the separator that
  commits to another key, when a single key is left, the whole key.
* close: the token that closes the arguments -> the markup up to where a
  further call and the end of the turn differ (XML: also after each value).
* turn-end: the token that starts the end of the turn -> the rest before EOS.

Each row (but the forced scaffold) is gated by the format's parser state
(`ffwd.templates.formats.base` rules), so a row fires only at the position
its rendering had.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ffwd.fill import EchoConfig, FillPlan, FillRow
from ffwd.fill.session import FillKind
from ffwd.templates.formats import ToolFormat, detect_format, get_format
from ffwd.templates.formats.base import (
    AllKeysUsed,
    AtPosition,
    CallLayout,
    KeySoFar,
    NameSoFar,
    OnlyKeyLeft,
    Rule,
    ToolCallContext,
)
from ffwd.templates.render import normalize_tools, render_chat

SLOTS = 4  # sentinel values per type; every key meets each of them
ANCHOR = 2  # tokens before a name that anchor its rows
MAX_TRIGGER = 8
USER = {"role": "user", "content": "Hi"}
CONTENT = "Ok."
TURN_END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>")

# Sentinel values per JSON type: a letter, an empty or punctuation start, a
# space start, so that merges of the opening quote with a value are seen.
SENTINELS: dict[str, tuple[Any, ...]] = {
    "string": ("Vx", "", "-1", " é"),
    "integer": (7, -3, 0, 42),
    "number": (1.5, -2, 0, 7),
    "boolean": (True, False, True, False),
    "array": ([], ["Vx"], [7], [[]]),
    "object": ({}, {"Vx": 1}, {}, {"Vx": "-"}),
    "null": (None, None, None, None),
}
MIXED = ("Vx", 7, True, None)


@dataclass(frozen=True)
class CompiledTools:
    """A request's plan plus what it takes to gate its rows."""

    plan: FillPlan
    format: ToolFormat
    tokenizer: Any
    rules: Mapping[FillRow, tuple[Rule, ...]] = field(default_factory=dict)

    def new_context(self) -> ToolCallContext:
        """A fresh per-request `StrictFillContext` for this plan's rows."""
        return self.format.new_context(self.tokenizer, self.rules)


def compile_plan(
    tokenizer: Any,
    template: str,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: object = "auto",
    eos_ids: Iterable[int] = (),
    fmt: str | None = None,
    echo: EchoConfig | None = None,
) -> FillPlan:
    return compile_tools(tokenizer, template, tools, tool_choice, eos_ids, fmt, echo).plan


def compile_tools(
    tokenizer: Any,
    template: str,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: object = "auto",
    eos_ids: Iterable[int] = (),
    fmt: str | None = None,
    echo: EchoConfig | None = None,
) -> CompiledTools:
    """Rows for `tools` under `tool_choice` (``auto``, ``none``, ``required``,
    or ``{"type": "function", "function": {"name": ...}}``)."""
    normalized = normalize_tools(tools)
    fmt_obj = get_format(fmt or detect_format(template))
    eos = tuple(int(i) for i in eos_ids)
    choice = _choice(tool_choice, normalized)
    if choice == "none" or not normalized:
        return CompiledTools(FillPlan(echo=echo, eos=eos), fmt_obj, tokenizer)
    called = normalized if choice in ("auto", "required") else [
        t for t in normalized if t["function"]["name"] == choice
    ]
    builder = _Builder(tokenizer, template, fmt_obj, frozenset(eos))
    builder.build(called, forced=choice != "auto")
    plan = FillPlan(tuple(builder.rules), echo, frozenset(builder.delimiters), eos)
    return CompiledTools(plan, fmt_obj, tokenizer, {r: tuple(v) for r, v in builder.rules.items()})


def default_eos_ids(tokenizer: Any) -> tuple[int, ...]:
    """The EOS id and the single-token turn ends the tokenizer has."""
    out: list[int] = []
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        out.append(tokenizer.eos_token_id)
    unk = getattr(tokenizer, "unk_token_id", None)
    for text in TURN_END_TOKENS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1 and ids[0] != unk and ids[0] not in out:
            out.append(ids[0])
    return tuple(out)


def _choice(tool_choice: object, tools: Sequence[Mapping[str, Any]]) -> str:
    names = [t["function"]["name"] for t in tools]
    if tool_choice in ("auto", "none", "required"):
        return str(tool_choice)
    fn = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ValueError(
            f"tool_choice {tool_choice!r}: expected 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": ...}}'
        )
    if name not in names:
        raise ValueError(f"tool_choice names {name!r}, which is not among the tools {names}")
    return name


def sentinel(schema: Mapping[str, Any], slot: int) -> Any:
    """The sentinel value for a property schema in rendering slot `slot`.

    >>> sentinel({"type": "integer"}, 1), sentinel({"enum": ["c", "f"]}, 3)
    (-3, 'f')
    """
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[slot % len(enum)]
    kind = schema.get("type")
    values = SENTINELS.get(kind, MIXED) if isinstance(kind, str) else MIXED
    return values[slot % SLOTS]


def variants(parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Argument objects to render one tool with: keys rotated so each comes
    first once, each key meeting every sentinel slot; ``{}`` when allowed.

    >>> variants({"properties": {"a": {"type": "integer"}}, "required": ["a"]})
    [{'a': 7}, {'a': -3}, {'a': 0}, {'a': 42}]
    """
    props = list((parameters.get("properties") or {}).items())
    if not props:
        return [{}]
    n = len(props)
    out = []
    for r in range(max(n, SLOTS)):
        order = [(i, *props[i]) for i in [(r + j) % n for j in range(n)]]
        out.append({key: sentinel(schema, (r + i) % SLOTS) for i, key, schema in order})
    if not parameters.get("required"):
        out.append({})
    return out


def lcp(seqs: Iterable[Sequence[int]]) -> list[int]:
    """Longest common prefix.

    >>> lcp([[1, 2, 3], [1, 2, 4], [1, 2]])
    [1, 2]
    """
    it = iter(seqs)
    first = next(it, None)
    if first is None:
        return []
    out = list(first)
    for seq in it:
        n = 0
        for a, b in zip(out, seq, strict=False):
            if a != b:
                break
            n += 1
        del out[n:]
    return out


@dataclass
class _Sample:
    """One rendering: its text, the assistant turn's ids and their offsets."""

    tool: Mapping[str, Any]
    text: str
    a0: int  # where the assistant turn starts
    ids: list[int]
    starts: list[int]
    ends: list[int]
    calls: list[CallLayout]
    clean: bool  # the prompt's own ids end exactly where the turn starts

    def tok(self, char: int) -> int:
        """Index of the token that contains character `char`."""
        return max(0, bisect.bisect_right(self.starts, char) - 1)

    def until(self, i: int, cap: float, eos: frozenset[int]) -> list[int]:
        """Ids from `i` on, stopping before EOS and before a token that reaches `cap`."""
        out = []
        for j in range(i, len(self.ids)):
            if self.ids[j] in eos or self.ends[j] > cap:
                break
            out.append(self.ids[j])
        return out


class _Builder:
    def __init__(self, tokenizer: Any, template: str, fmt: ToolFormat, eos: frozenset[int]):
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError("strict rows need a fast tokenizer (one with character offsets)")
        self.tokenizer = tokenizer
        self.backend = backend
        self.template = template
        self.fmt = fmt
        self.eos = eos
        self.rules: dict[FillRow, list[Rule]] = {}
        self.delimiters: set[int] = set()
        self._where_cache: dict[tuple[object, ...], tuple[object, ...]] = {}

    # --- rendering ----------------------------------------------------------
    def _render(
        self, specs: Sequence[tuple[Mapping[str, Any], list[tuple[str, dict[str, Any]]], str | None]]
    ) -> list[_Sample]:
        prompts: dict[str, str] = {}
        texts = []
        for tool, calls, content in specs:
            name = tool["function"]["name"]
            if name not in prompts:
                prompts[name] = self._chat([USER], tool, True)
            message = {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls
                ],
            }
            texts.append(self._chat([USER, message], tool, False))
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        out = []
        for (tool, calls, _), text, enc in zip(specs, texts, encodings, strict=True):
            prompt = prompts[tool["function"]["name"]]
            if not text.startswith(prompt):
                raise ValueError(
                    "the chat template renders the generation prompt differently from the "
                    "start of an assistant turn; strict rows cannot be aligned"
                )
            out.append(self._sample(tool, calls, text, len(prompt), enc))
        return out

    def _chat(self, messages: list[dict[str, Any]], tool: Mapping[str, Any], gen: bool) -> str:
        return render_chat(self.template, messages, [tool], add_generation_prompt=gen,
                           tokenizer=self.tokenizer)

    def _sample(
        self, tool: Mapping[str, Any], calls: list[tuple[str, dict[str, Any]]], text: str,
        a0: int, enc: Any,
    ) -> _Sample:
        first = next((i for i, (s, _) in enumerate(enc.offsets) if s >= a0), len(enc.ids))
        clean = first == 0 or enc.offsets[first - 1][1] <= a0
        ids: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        for tok, (s, e) in zip(enc.ids[first:], enc.offsets[first:], strict=True):
            ids.append(tok)
            starts.append(s)
            ends.append(e)
            if tok in self.eos:
                break
        layouts = []
        pos = a0
        for name, args in calls:
            lay = self.fmt.locate(text, pos, name, args)
            if lay is None:
                raise ValueError(
                    f"tool {name!r}: the chat template's tool call does not look like the "
                    f"{self.fmt.name} format"
                )
            layouts.append(lay)
            pos = lay.close + 1
        return _Sample(tool, text, a0, ids, starts, ends, layouts, clean)

    def _where(self, sample: _Sample, i: int) -> tuple[object, ...]:
        """The parser's position after token `i` of `sample` (what AtPosition compares)."""
        key = (sample.text[sample.a0 : sample.ends[i]],)
        if key not in self._where_cache:
            parser = self.fmt.new_parser()
            parser.feed(key[0])
            self._where_cache[key] = parser.state.where
        return self._where_cache[key]

    def _add(self, trigger: Sequence[int], emit: Sequence[int], kind: FillKind, rule: Rule | None) -> None:
        if len(emit) < 2 or not trigger:
            return  # a one-token span saves nothing
        row = FillRow(tuple(trigger[-MAX_TRIGGER:]), tuple(emit), kind, rule is not None)
        rules = self.rules.setdefault(row, [])
        if rule is not None and rule not in rules:
            rules.append(rule)

    # --- compiling ------------------------------------------------------------
    def build(self, tools: Sequence[Mapping[str, Any]], forced: bool) -> None:
        specs = [
            (tool, [(tool["function"]["name"], args)], None)
            for tool in tools
            for args in variants(tool["function"]["parameters"])
        ]
        singles = self._render(specs)
        by_tool: dict[str, list[_Sample]] = {}
        for s in singles:
            by_tool.setdefault(s.tool["function"]["name"], []).append(s)
        head = singles[0]
        extras = self._extras(head)
        delta = self._close_delta(head, extras[0] if extras else None)
        if forced:
            self._forced_scaffold(singles)
        self._scaffold(singles, extras)
        self._names(singles, by_tool)
        for samples in by_tool.values():
            self._keys(samples)
        self._value_ends(singles, delta)
        self._closes(singles, delta)
        for s in singles:
            for arg in s.calls[0].args:
                if arg.delimiter is not None:
                    self.delimiters.add(s.ids[s.tok(arg.delimiter)])

    def _extras(self, head: _Sample) -> list[_Sample]:
        """Two calls in one turn, and a call after content (when the template can)."""
        name = head.tool["function"]["name"]
        first = (name, dict(variants(head.tool["function"]["parameters"])[0]))
        out = []
        for calls, content in (([first, first], None), ([first], CONTENT)):
            if len(calls) > 1 and not self.fmt.parallel:
                continue
            try:
                out.extend(self._render([(head.tool, calls, content)]))
            except ValueError:
                continue
        return [s for s in out if s.text != head.text]

    def _close_delta(self, single: _Sample, double: _Sample | None) -> int | None:
        """Characters from the closing commit to where "another call" and "end of
        turn" part ways; None when one turn carries a single call."""
        if double is None or len(double.calls) < 2:
            return None
        a, b = single.text, double.text
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        return n - single.calls[0].close

    def _forced_scaffold(self, singles: list[_Sample]) -> None:
        if not all(s.clean and s.ids for s in singles) or len({s.ids[0] for s in singles}) != 1:
            return
        prompt_ids = self.tokenizer.encode(
            singles[0].text[: singles[0].a0], add_special_tokens=False
        )
        emit = lcp(s.ids[1:] for s in singles)
        self._add([*prompt_ids[-3:], singles[0].ids[0]], self._cut(emit), "scaffold", None)

    def _cut(self, ids: list[int]) -> list[int]:
        for i, tok in enumerate(ids):
            if tok in self.eos:
                return ids[:i]
        return ids

    def _scaffold(self, singles: list[_Sample], extras: list[_Sample]) -> None:
        def after_marker(s: _Sample, call: int) -> tuple[int, list[int]]:
            ms, me = s.calls[call].open
            last = s.tok(me - 1)
            return last, s.ids[last + 1 :]

        canon = self._cut(lcp(after_marker(s, 0)[1] for s in singles))
        occurrences = [(singles[0], 0)] + [(s, i) for s in extras for i in range(len(s.calls))]
        for s, call in occurrences:
            last, rest = after_marker(s, call)
            first = s.tok(s.calls[call].open[0])
            emit = lcp([rest, canon])
            self._add(s.ids[first : last + 1], emit, "scaffold", AtPosition(self._where(s, last)))

    def _names(self, singles: list[_Sample], by_tool: dict[str, list[_Sample]]) -> None:
        b = len(lcp(s.ids for s in singles))
        runs = {name: lcp(s.ids for s in samples) for name, samples in by_tool.items()}
        for name, run in runs.items():
            s = by_tool[name][0]
            ns, ne = s.calls[0].name
            others = [r[b:] for n, r in runs.items() if n != name]
            for j in range(1, len(run) - b):
                prefix = run[b : b + j]
                if any(o[:j] == prefix for o in others):
                    continue
                text = s.text[ns : max(ns, min(ne, s.ends[b + j - 1]))]
                self._add(run[max(0, b - ANCHOR) : b + j], self._cut(run[b + j :]), "name",
                          NameSoFar(text))

    def _keys(self, samples: list[_Sample]) -> None:
        s0 = samples[0]
        tool = s0.text[slice(*s0.calls[0].name)]
        occurrences: dict[str, list[tuple[_Sample, Any]]] = {}
        for s in samples:
            for arg in s.calls[0].args:
                occurrences.setdefault(arg.key, []).append((s, arg))
        raw = {k: occ[0][0].text[slice(*occ[0][1].key_span)] for k, occ in occurrences.items()}
        runs: dict[str, list[int]] = {}
        for key, occ in occurrences.items():
            run = self._key_run(occ)
            if run is not None:
                runs[key] = run
        for key, run in runs.items():
            s, arg = occurrences[key][0]
            ks, ke = arg.key_span
            start = s.tok(ks)
            width = s.tok(ke - 1) - start + 1
            anchors = {o.ids[o.tok(a.key_span[0]) - 1] for o, a in occurrences[key]}
            for j in range(1, width + 1):
                rivals = frozenset(
                    raw[k] for k in occurrences
                    if k != key and (k not in runs or runs[k][:j] == run[:j])
                )
                rule = KeySoFar(tool, raw[key], s.text[ks : min(ke, s.ends[start + j - 1])], rivals)
                for anchor in sorted(anchors):
                    self._add([anchor, *run[:j]], run[j:], "key", rule)
            others = frozenset(raw[k] for k in occurrences if k != key)
            for o, a in occurrences[key]:
                if a.lead < 0:
                    continue
                lead, first = o.tok(a.lead), o.tok(a.key_span[0])
                if lead < first:
                    rule2 = OnlyKeyLeft(self._where(o, lead), tool, raw[key], others)
                    self._add([o.ids[lead]], [*o.ids[lead + 1 : first], *run], "key", rule2)

    @staticmethod
    def _key_run(occurrences: list[tuple[_Sample, Any]]) -> list[int] | None:
        """The ids common to every rendering of a key, from its first token on,
        or None when the key does not start on a token boundary everywhere."""
        tails = []
        for s, arg in occurrences:
            i = s.tok(arg.key_span[0])
            if i == 0 or s.starts[i] != arg.key_span[0]:
                return None
            tails.append(s.ids[i:])
        run = lcp(tails)
        s, arg = occurrences[0]
        width = s.tok(arg.key_span[1] - 1) - s.tok(arg.key_span[0]) + 1
        return run if len(run) >= width else None

    def _value_ends(self, singles: list[_Sample], delta: int | None) -> None:
        """XML-style formats mark a value's end; what follows is markup up to the
        next parameter, or (every key written) up to the end of the call."""
        ends: dict[int, list[list[int]]] = {}
        lasts: dict[tuple[int, str], list[list[int]]] = {}
        where: dict[int, tuple[object, ...]] = {}
        tools: dict[str, tuple[str, frozenset[str]]] = {}
        for s in singles:
            call = s.calls[0]
            for i, arg in enumerate(call.args):
                if arg.end is None:
                    continue
                t = s.tok(arg.end)
                trigger = s.ids[t]
                where.setdefault(trigger, self._where(s, t))
                nxt = call.args[i + 1].lead if i + 1 < len(call.args) else call.close
                ends.setdefault(trigger, []).append(s.until(t + 1, nxt, self.eos))
                if i + 1 == len(call.args):
                    tool = s.text[slice(*call.name)]
                    keys = frozenset(s.text[slice(*a.key_span)] for a in call.args)
                    tools[tool] = (tool, keys)
                    cap = call.close + delta if delta is not None else float("inf")
                    lasts.setdefault((trigger, tool), []).append(s.until(t + 1, cap, self.eos))
        for (trigger, tool), conts in lasts.items():
            name, keys = tools[tool]
            self._add([trigger], lcp(conts), "close", AllKeysUsed(where[trigger], name, keys))
        for trigger, conts in ends.items():
            self._add([trigger], lcp(conts), "close", AtPosition(where[trigger]))

    def _closes(self, singles: list[_Sample], delta: int | None) -> None:
        closes: dict[tuple[int, bool], list[list[int]]] = {}
        ends: dict[int, list[list[int]]] = {}
        where: dict[object, tuple[object, ...]] = {}
        for s in singles:
            c = s.calls[0].close
            t = s.tok(c)
            cap = c + delta if delta is not None else float("inf")
            straddles = s.ends[t] > cap
            key = (s.ids[t], straddles)
            where.setdefault(key, self._where(s, t))
            closes.setdefault(key, []).append(s.until(t + 1, float("inf") if straddles else cap,
                                                      self.eos))
            if delta is None or straddles:
                continue
            u = s.tok(int(cap))
            if u < len(s.ids) and s.ids[u] not in self.eos:
                where.setdefault(s.ids[u], self._where(s, u))
                ends.setdefault(s.ids[u], []).append(s.until(u + 1, float("inf"), self.eos))
        for key, conts in closes.items():
            self._add([key[0]], lcp(conts), "close", AtPosition(where[key]))
        for trigger, conts in ends.items():
            self._add([trigger], lcp(conts), "turn-end", AtPosition(where[trigger]))
