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
Every called tool is rendered several times as an assistant turn: its keys
rotated so that each comes first once, its values drawn from sentinels of the
schema's type so that each key meets every one of them. The turns sit one per
assistant message in a few conversations, each rendered by the template and
tokenized as a whole. The format's ``locate`` finds the characters of the
marker, name, keys and values; token offsets map them to token positions.

A row is a run of ids that every rendering of the same position shares: a
token that merges with a name or a value differs between renderings and so
never enters a row. A run stops exactly where renderings part ways, which is
where the next token stops being determined, so a row carries everything its
trigger determines. (The last token of a turn that another turn follows may
merge with that turn; there only turns that really end a rendering count.)

* scaffold: the marker's tokens -> what follows up to where tools differ
  (with one tool: the name and the markup up to the first argument);
  ``required``/named: the prompt's last tokens -> that whole run, marker
  included (proposed by `FillSession.start` before the first sample).
* name: the name tokens written so far, once unique among the tools -> the
  rest of the name and the markup up to the first argument.
* key: a key's first tokens, once unique among the tool's unused keys ->
  the rest of the key and its separator; and after the separator that
  commits to another key, when a single key is left, the whole key.
* close: the token that closes the arguments -> the markup up to where a
  further call and the end of the turn differ (XML: also after each value).
* turn-end: the token that starts the end of the turn -> the rest before EOS.

``tool_choice="none"`` compiles no tool rows; a named function compiles only
its own rows (plus the forced scaffold, which then includes its name).

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
    ArgLayout,
    AtPosition,
    CallLayout,
    KeySoFar,
    NameSoFar,
    OnlyKeyLeft,
    Rule,
    ToolCallContext,
)
from ffwd.templates.render import normalize_tools, render_chat

SLOTS = 2  # sentinel values per type; every key meets each of them
ENUM_MAX = 8  # enums up to this size are rendered value by value
TURNS = 64  # calls per rendering (one assistant turn each)
ANCHOR = 2  # tokens before a name that anchor its rows
MAX_TRIGGER = 8
USER = {"role": "user", "content": "Hi"}
PROMPT_ENDINGS = ("Hi", "Is it 5?")  # user turns that end in a letter, in punctuation
CONTENT = "Ok."
TURN_END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>")

# Two sentinel values per JSON type whose first characters both merge with what
# precedes a value (the opening quote, the space), in different ways: where the
# renderings part, any value could.
SENTINELS: dict[str, tuple[Any, ...]] = {
    "string": ("", "-1"),
    "integer": (7, -3),
    "number": (1.5, -2),
    "boolean": (True, False),
    "array": ([], ["-1"]),
    "object": ({}, {"Vx": 1}),
    "null": (None, None),
}
MIXED = ("", -3)
PROBE_KEY = "k"
PROBE_VALUES: tuple[Any, ...] = (
    "Vx",
    "-1",
    "",
    7,
    -3,
    1.5,
    True,
    False,
    None,
    [],
    ["Vx"],
    [7],
    {},
    {"Vx": 1},
)


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
    """`compile_tools(...).plan`: the rows, echo settings, delimiters and EOS ids."""
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
    called = (
        normalized
        if choice in ("auto", "required")
        else [t for t in normalized if t["function"]["name"] == choice]
    )
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
    """The sentinel value for a property schema in rendering slot `slot`: an
    enum's own values (`variants` renders the rest of a short enum), else the
    type's sentinels.

    >>> sentinel({"type": "integer"}, 1), sentinel({"enum": ["c", "f", "k"]}, 1)
    (-3, 'f')
    """
    enum = _enum(schema)
    if enum:
        return enum[slot % len(enum)]
    kind = schema.get("type")
    values = SENTINELS.get(kind, MIXED) if isinstance(kind, str) else MIXED
    return values[slot % SLOTS]


def _enum(schema: Mapping[str, Any]) -> list[Any]:
    """The enum values, when there are few enough to render them all."""
    enum = schema.get("enum")
    return enum if isinstance(enum, list) and 0 < len(enum) <= ENUM_MAX else []


def variants(parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Argument objects to render one tool with: every key meets every
    sentinel slot (and every value of a short enum), every key comes first
    once (a lone key where the rotations run out), and ``{}`` when no key is
    required.

    >>> variants({"properties": {"a": {"type": "integer"}, "b": {}, "c": {}}, "required": ["a"]})
    [{'a': 7, 'b': -3, 'c': ''}, {'b': '', 'c': -3, 'a': -3}, {'c': ''}]
    >>> variants({"properties": {"u": {"enum": ["c", "f", "k"]}}})
    [{'u': 'c'}, {'u': 'f'}, {'u': 'k'}, {}]
    """
    props = list((parameters.get("properties") or {}).items())
    if not props:
        return [{}]
    n = len(props)
    out = [
        {
            props[i][0]: sentinel(props[i][1], (r + i) % SLOTS)
            for i in [(r + j) % n for j in range(n)]
        }
        for r in range(SLOTS)
    ]
    out += [{key: sentinel(schema, 0)} for key, schema in props[SLOTS:]]
    out += [{key: value} for key, schema in props for value in _enum(schema)[SLOTS:]]
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
class _Text:
    """One whole rendering and its ids with their character offsets."""

    text: str
    ids: Sequence[int]
    starts: Sequence[int]
    ends: Sequence[int]

    def tok(self, char: int) -> int:
        """Index of the token that contains character `char`."""
        i = bisect.bisect_right(self.starts, char) - 1
        return i if i > 0 else 0


# Ids of a rendering from an index on, up to (not into) the token that reaches a
# character; "soft" when that limit only means "unknown from here" (the end of a
# turn that another turn follows), not "something else may follow".
_View = tuple[_Text, int, float, bool]
# A token at a structural character: (its id, what the character does, chars of the
# token before it, chars from it on). The same token can make different points:
# "</" ends a value and, elsewhere, the call.
_Point = tuple[int, str, int, int]


def common(views: Iterable[_View], eos: frozenset[int]) -> list[int]:
    """The ids all views share, stopping before EOS (their lcp, without copying).
    A view past its soft limit has no say; past a hard one it ends the run."""
    spans = list(views)
    out: list[int] = []
    k = 0
    while True:
        tok = -1
        for r, i, cap, soft in spans:
            j = i + k
            if j >= len(r.ids) or r.ends[j] > cap or r.ids[j] in eos:
                if soft and j < len(r.ids) and r.ids[j] not in eos:
                    continue
                return out
            if tok not in (-1, r.ids[j]):
                return out
            tok = r.ids[j]
        if tok == -1:
            return out
        out.append(tok)
        k += 1


@dataclass
class _Call:
    """One rendered call: its rendering, layout, and where its turn begins and
    where its determined markup must end."""

    r: _Text
    tool: str
    lay: CallLayout
    a0: int  # start of its assistant turn
    more: float  # where "another call" and "end of turn" part (inf: one call per turn)
    end: float  # end of the turn's text, or of what is known of it (`last` is False)
    last: bool = True  # no turn follows in this rendering

    @property
    def clean(self) -> bool:
        """A token starts exactly where the turn starts (the prompt does not merge into it)."""
        i = self.r.tok(self.a0)
        return self.r.starts[i] == self.a0

    def run(self, i: int) -> _View:
        """From token `i` to where the call's determined markup must end."""
        return self.view(i, min(self.more, self.end))

    def view(self, i: int, cap: float) -> _View:
        return self.r, i, cap, cap >= self.end and not self.last


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
        self._wheres: dict[_Point, tuple[object, ...]] = {}

    # --- rendering ----------------------------------------------------------
    def _render(
        self, conversations: Sequence[list[dict[str, Any]]], tool: Mapping[str, Any]
    ) -> list[_Text]:
        texts = [
            render_chat(
                self.template,
                messages,
                [tool],
                add_generation_prompt=False,
                tokenizer=self.tokenizer,
            )
            for messages in conversations
        ]
        out = []
        for text, enc in zip(
            texts, self.backend.encode_batch(texts, add_special_tokens=False), strict=True
        ):
            offsets = enc.offsets
            out.append(_Text(text, enc.ids, [s for s, _ in offsets], [e for _, e in offsets]))
        return out

    def _locate(
        self, r: _Text, calls: Sequence[tuple[str, dict[str, Any]]], pos: int
    ) -> list[CallLayout]:
        out = []
        for name, args in calls:
            lay = self.fmt.locate(r.text, pos, name, args)
            if lay is None:
                raise ValueError(
                    f"tool {name!r}: the chat template's tool call does not look like the "
                    f"{self.fmt.name} format"
                )
            out.append(lay)
            pos = lay.close + 1
        return out

    def _where(self, call: _Call, i: int) -> tuple[object, ...]:
        """The parser's position after token `i` (what `AtPosition` compares)."""
        parser = self.fmt.new_parser()
        parser.feed(call.r.text[call.a0 : call.r.ends[i]])
        return parser.state.where

    def _add(
        self, trigger: Sequence[int], emit: Sequence[int], kind: FillKind, rule: Rule | None
    ) -> None:
        emit = self._cut(emit)
        if len(emit) < 2 or not trigger:
            return  # a one-token span saves nothing
        row = FillRow(tuple(trigger[-MAX_TRIGGER:]), tuple(emit), kind, rule is not None)
        rules = self.rules.setdefault(row, [])
        if rule is not None and rule not in rules:
            rules.append(rule)

    def _cut(self, ids: Sequence[int]) -> list[int]:
        """`ids` up to the first EOS: ending the turn is the model's decision."""
        out = []
        for tok in ids:
            if tok in self.eos:
                break
            out.append(tok)
        return out

    # --- the renderings -------------------------------------------------------------
    def calls(
        self, tools: Sequence[Mapping[str, Any]]
    ) -> tuple[list[_Call], list[_Call], list[_Call], list[int]]:
        """Every variant of every tool as a call (several turns per rendering),
        the probe calls (closing shapes only), the extra occurrences of a marker
        (a second call, a call after content), and the last ids every generation
        prompt ends with."""
        first = tools[0]
        name0 = first["function"]["name"]
        call0 = (name0, variants(first["function"]["parameters"])[0])
        prompt = render_chat(self.template, [USER], [first], tokenizer=self.tokenizer)
        head_r, *extra_r = self._render_extras(first, call0)
        if not head_r.text.startswith(prompt):
            raise ValueError(
                "the chat template renders the generation prompt differently from the start of "
                "an assistant turn; strict rows cannot be aligned"
            )
        a0 = len(prompt)
        head = self._locate(head_r, [call0], a0)[0]
        pre = head_r.text[a0 : head.open[0]]  # what a turn writes before its first marker
        turn_len = len(head_r.text) - head.close
        # A turn that another turn follows may end in a token merged with the next
        # one: there, the turn's last token (as the lone rendering has it) is unknown.
        inner_len = head_r.starts[head_r.tok(len(head_r.text) - 1)] - head.close
        delta = self._close_delta(head_r.text, head, extra_r)

        def call(r: _Text, name: str, lay: CallLayout, start: int, last: bool = True) -> _Call:
            more = lay.close + delta if delta is not None else float("inf")
            end = lay.close + (turn_len if last else inner_len)
            return _Call(r, name, lay, start, more, end, last)

        extras = []
        for r, (calls, _) in zip(extra_r, self._extra_specs(call0), strict=False):
            for lay in self._locate(r, calls, a0):
                extras.append(call(r, name0, lay, a0))
        jobs = [
            (tool["function"]["name"], args) for round_ in _rounds(tools) for tool, args in round_
        ]
        # One-key calls whose values end in every common way: how a value's end
        # merges with the closing markup does not depend on the tool.
        jobs += [(name0, {PROBE_KEY: value}) for value in PROBE_VALUES]
        opening = head_r.text[head.open[0] : head.close + 1]
        head_call = call(head_r, name0, head, a0)
        # Turns back to back, then with user turns between, then one per rendering:
        # the first layout that renders the lone call's ids faithfully.
        for turns, users in ((TURNS, False), (TURNS, True), (1, True)):
            try:
                out = self._turn_calls(jobs, call0, first, turns, users, opening, pre, call)
            except ValueError:
                continue
            if _body(head_call) == _body(out[0]):
                break
        else:
            raise ValueError("the chat template renders calls differently in longer conversations")
        split = len(out) - len(PROBE_VALUES)
        return [head_call, *out[:split]], out[split:], extras, self._prompt_tail(first)

    def _prompt_tail(self, tool: Mapping[str, Any]) -> list[int]:
        """The last ids (at most 3) of every generation prompt, whatever the user
        wrote: where the prompt ends in text that merges with the user's words
        (``?[/INST]``), only the ids after the merge."""
        tails = []
        for text in PROMPT_ENDINGS:
            prompt = render_chat(
                self.template, [{"role": "user", "content": text}], [tool], tokenizer=self.tokenizer
            )
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
            tails.append(ids[::-1])
        return lcp(tails)[:3][::-1]

    def _turn_calls(
        self,
        jobs: Sequence[tuple[str, dict[str, Any]]],
        head: tuple[str, dict[str, Any]],
        tool: Mapping[str, Any],
        turns: int,
        users: bool,
        opening: str,
        pre: str,
        call: Any,
    ) -> list[_Call]:
        """Render the jobs `turns` per conversation, one call per assistant turn
        (with a user turn before each when `users`). Each conversation opens with
        the lone rendering's call, which marks where the turns begin (the system
        prompt may quote the markers too)."""
        out: list[_Call] = []
        chunks = _chunks(jobs, turns)
        conversations = []
        for chunk in chunks:
            messages: list[dict[str, Any]] = [USER, _assistant([head])]
            for job in chunk:
                messages += [USER, _assistant([job])] if users else [_assistant([job])]
            conversations.append(messages)
        for chunk, r in zip(chunks, self._render(conversations, tool), strict=True):
            pos = r.text.find(opening)
            if pos < 0:
                raise ValueError(
                    "the chat template renders a call differently in a longer conversation"
                )
            layouts = self._locate(r, [head, *chunk], pos)[1:]
            for i, ((name, _), lay) in enumerate(zip(chunk, layouts, strict=True)):
                start = lay.open[0] - len(pre)
                if r.text[start : lay.open[0]] != pre or start <= pos:
                    raise ValueError("the chat template renders later turns differently")
                out.append(call(r, name, lay, start, last=i + 1 == len(chunk)))
                pos = lay.close
        return out

    @staticmethod
    def _extra_specs(
        call0: tuple[str, dict[str, Any]],
    ) -> list[tuple[list[tuple[str, dict[str, Any]]], str | None]]:
        return [([call0, call0], None), ([call0], CONTENT)]

    def _render_extras(
        self, tool: Mapping[str, Any], call0: tuple[str, dict[str, Any]]
    ) -> list[_Text]:
        """The lone call, then (where the template allows) two calls in one turn
        and a call after content."""
        out = self._render([[USER, _assistant([call0])]], tool)
        for calls, content in self._extra_specs(call0):
            if len(calls) > 1 and not self.fmt.parallel:
                break
            try:
                out += self._render([[USER, _assistant(calls, content)]], tool)
            except ValueError:
                break
        return out

    @staticmethod
    def _close_delta(single: str, head: CallLayout, extras: list[_Text]) -> int | None:
        """Characters from the closing commit to where "another call" and "end of
        turn" part ways; None when a turn carries one call."""
        if not extras:
            return None
        double = extras[0].text
        n = next(
            (i for i, (x, y) in enumerate(zip(single, double, strict=False)) if x != y),
            min(len(single), len(double)),
        )
        return n - head.close

    # --- compiling ------------------------------------------------------------
    def build(self, tools: Sequence[Mapping[str, Any]], forced: bool) -> None:
        calls, probes, extras, prompt_tail = self.calls(tools)
        by_tool: dict[str, list[_Call]] = {}
        for c in calls:
            by_tool.setdefault(c.tool, []).append(c)
        runs = {
            name: common((c.run(c.r.tok(c.lay.name[0])) for c in cs), self.eos)
            for name, cs in by_tool.items()
        }
        shared = lcp(runs.values())  # what every tool's name run starts with
        if forced:
            self._forced(calls, shared, prompt_tail)
        self._scaffold([calls[0], *extras], shared)
        self._names(calls[0], runs, by_tool, len(shared))
        for cs in by_tool.values():
            self._keys(cs)
        self._value_ends(calls)
        self._closes([*calls, *probes])
        for c in [*calls, *probes]:
            for arg in c.lay.args:
                if arg.delimiter is not None:
                    self.delimiters.add(c.r.ids[c.r.tok(arg.delimiter)])

    def _forced(self, calls: list[_Call], common: list[int], prompt_tail: list[int]) -> None:
        """A forced call: the prompt's last ids trigger the turn's opening run
        (`FillSession.start` proposes it before the first sample).

        Generation starts a fresh token after the prompt, so the run comes from
        turns that start on a token boundary; where the template's own prompt
        merges into the turn (``[/INST][TOOL_CALLS]``), turns after a special
        token show how the turn tokenizes on its own."""
        heads = {tuple(c.r.ids[c.r.tok(c.a0) : c.r.tok(c.lay.name[0])]) for c in calls if c.clean}
        if len(heads) == 1:
            self._add(prompt_tail, [*heads.pop(), *common], "scaffold", None)

    def _scaffold(self, occurrences: list[_Call], common: list[int]) -> None:
        """The marker's ids -> the markup up to the name, and what all names share."""
        for c in occurrences:
            r = c.r
            first, last = r.tok(c.lay.open[0]), r.tok(c.lay.open[1] - 1)
            if r.starts[first] < c.lay.open[0] and first < last:
                first += 1  # merged with what precedes the marker: not part of the trigger
            emit = [*r.ids[last + 1 : r.tok(c.lay.name[0])], *common]
            self._add(r.ids[first : last + 1], emit, "scaffold", AtPosition(self._where(c, last)))

    def _names(
        self, c0: _Call, runs: dict[str, list[int]], by_tool: dict[str, list[_Call]], b: int
    ) -> None:
        """Once the name ids written so far fit one tool: the rest of its run."""
        n0 = c0.r.tok(c0.lay.name[0])
        anchor = c0.r.ids[max(0, n0 - ANCHOR) : n0]
        for name, unique in _unique_prefixes({n: r[b:] for n, r in runs.items()}).items():
            run = runs[name]
            c = by_tool[name][0]
            ns, ne = c.lay.name
            start = c.r.tok(ns)
            for j in range(max(1, unique), len(run) - b - 1):  # an emit needs 2 ids
                text = c.r.text[ns : max(ns, min(ne, c.r.ends[start + b + j - 1]))]
                trigger = [*anchor, *run[: b + j]][b : len(anchor) + b + j]
                self._add(trigger, run[b + j :], "name", NameSoFar(text))

    def _keys(self, calls: list[_Call]) -> None:
        """A key's first ids, once no unused key shares them -> the rest of the key
        and its separator; after a separator that commits to one more key, when a
        single key is left -> all of it."""
        c0 = calls[0]
        tool = c0.r.text[slice(*c0.lay.name)]
        occurrences: dict[str, list[tuple[_Call, ArgLayout]]] = {}
        for c in calls:
            for arg in c.lay.args:
                occurrences.setdefault(arg.key, []).append((c, arg))
        raw = {k: occ[0][0].r.text[slice(*occ[0][1].key_span)] for k, occ in occurrences.items()}
        runs = {k: run for k, occ in occurrences.items() if (run := self._key_run(occ)) is not None}
        for key, run in runs.items():
            c, arg = occurrences[key][0]
            ks, ke = arg.key_span
            start = c.r.tok(ks)
            width = c.r.tok(ke - 1) - start + 1
            anchors = sorted({o.r.ids[o.r.tok(a.key_span[0]) - 1] for o, a in occurrences[key]})
            # j = 0: right after the key's opening quote, when it is the one key left.
            for j in range(min(width, len(run) - 2) + 1):  # an emit needs 2 ids
                rivals = frozenset(
                    raw[k]
                    for k in occurrences
                    if k != key and (k not in runs or runs[k][:j] == run[:j])
                )
                text = c.r.text[ks : min(ke, c.r.ends[start + j - 1])]
                rule = KeySoFar(tool, raw[key], text, rivals)
                for anchor in anchors:
                    self._add([anchor, *run[:j]], run[j:], "key", rule)
            others = frozenset(raw.values()) - {raw[key]}
            self._only_key_left(tool, raw[key], others, occurrences[key], run)

    def _only_key_left(
        self,
        tool: str,
        key: str,
        others: frozenset[str],
        occurrences: list[tuple[_Call, ArgLayout]],
        run: list[int],
    ) -> None:
        """After the separator that commits to another key (JSON's comma), with
        `key` the only one left: the markup up to it and its whole run."""
        seen = set()
        for o, a in occurrences:
            if a.lead < 0:
                continue
            lead, point = self._point(o, a.lead, "lead")
            first = o.r.tok(a.key_span[0])
            between = tuple(o.r.ids[lead + 1 : first])
            if lead < first and (point, between) not in seen:
                seen.add((point, between))
                rule = OnlyKeyLeft(self._wheres[point], tool, key, others)
                self._add([point[0]], [*between, *run], "key", rule)

    def _key_run(self, occurrences: list[tuple[_Call, ArgLayout]]) -> list[int] | None:
        """The ids every rendering of a key shares, from its first token on, or
        None when the key does not start on a token boundary everywhere."""
        tails = []
        for c, arg in occurrences:
            i = c.r.tok(arg.key_span[0])
            if c.r.starts[i] != arg.key_span[0]:
                return None
            tails.append(c.run(i))
        run = common(tails, self.eos)
        c, arg = occurrences[0]
        width = c.r.tok(arg.key_span[1] - 1) - c.r.tok(arg.key_span[0]) + 1
        return run if len(run) >= width else None

    def _value_ends(self, calls: list[_Call]) -> None:
        """Formats that mark a value's end (XML): the markup up to the next
        parameter, or, once every key is written, up to the end of the call."""
        ends: dict[_Point, list[_View]] = {}
        lasts: dict[tuple[_Point, str], list[_View]] = {}
        follows: dict[_Point, list[tuple[_Call, str, str, _View]]] = {}
        keys: dict[str, frozenset[str]] = {}
        for c in calls:
            args = c.lay.args
            tool = c.r.text[slice(*c.lay.name)]
            # All of the tool's keys (a call may render only some of them).
            keys[tool] = keys.get(tool, frozenset()) | {c.r.text[slice(*a.key_span)] for a in args}
            for i, arg in enumerate(args):
                if arg.end is None:
                    continue
                t, point = self._point(c, arg.end, "value end")
                if i + 1 < len(args):
                    nxt = args[i + 1]
                    ends.setdefault(point, []).append(c.view(t + 1, nxt.lead))
                    key = c.r.text[slice(*nxt.key_span)]
                    view = c.view(t + 1, nxt.value_span[0])
                    follows.setdefault(point, []).append((c, tool, key, view))
                else:
                    ends.setdefault(point, []).append(c.view(t + 1, c.lay.close))
                    lasts.setdefault((point, tool), []).append(c.run(t + 1))
        for (point, tool), views in lasts.items():
            rule = AllKeysUsed(self._wheres[point], tool, keys[tool])
            self._add([point[0]], common(views, self.eos), "close", rule)
        for point, views in ends.items():
            base = common(views, self.eos)
            self._add([point[0]], base, "close", AtPosition(self._wheres[point]))
            self._next_parameter(len(base), follows.get(point, []), keys)

    def _next_parameter(
        self,
        skip: int,
        follows: list[tuple[_Call, str, str, _View]],
        keys: dict[str, frozenset[str]],
    ) -> None:
        """After a value's closing markup, the id that picks another parameter
        over the end of the call -> that parameter's opening markup, or, when a
        single key is left, all of it up to the value."""
        branches: dict[int, list[tuple[_Call, str, str, _View]]] = {}
        for c, tool, key, (r, i, cap, soft) in follows:
            if i + skip < len(r.ids):
                branches.setdefault(r.ids[i + skip], []).append((c, tool, key, (r, i, cap, soft)))
        for branch, members in branches.items():
            c, _, _, (_, i, _, _) = members[0]
            where = self._where(c, i + skip)
            after = [(r, i + skip + 1, cap, soft) for _, _, _, (r, i, cap, soft) in members]
            by_key: dict[tuple[str, str], list[_View]] = {}
            for (_, tool, key, _), view in zip(members, after, strict=True):
                by_key.setdefault((tool, key), []).append(view)
            for (tool, key), views in by_key.items():
                rule = OnlyKeyLeft(where, tool, key, keys[tool] - {key})
                self._add([branch], common(views, self.eos), "key", rule)
            self._add([branch], common(after, self.eos), "key", AtPosition(where))

    def _closes(self, calls: list[_Call]) -> None:
        """The id that closes the arguments -> the markup up to where another call
        and the end of the turn part; the id that starts the end -> the rest."""
        closes: dict[_Point, list[_View]] = {}
        ends: dict[_Point, list[_View]] = {}
        for c in calls:
            r = c.r
            t, point = self._point(c, c.lay.close, "close")
            straddles = r.ends[t] > c.more  # the closing id already starts the end of the turn
            closes.setdefault(point, []).append(c.view(t + 1, c.end) if straddles else c.run(t + 1))
            if straddles or c.more == float("inf"):
                continue
            u, start = self._point(c, int(c.more), "turn end")
            if r.ids[u] not in self.eos:
                ends.setdefault(start, []).append(c.view(u + 1, c.end))
        for point, views in closes.items():
            rule = AtPosition(self._wheres[point])
            self._add([point[0]], common(views, self.eos), "close", rule)
        for point, views in ends.items():
            rule = AtPosition(self._wheres[point])
            self._add([point[0]], common(views, self.eos), "turn-end", rule)

    def _point(self, c: _Call, char: int, role: str) -> tuple[int, _Point]:
        """The token holding `char` (which does `role`), and the point it makes;
        the parser's position after it is worked out once per point."""
        r = c.r
        t = r.tok(char)
        point = (r.ids[t], role, char - r.starts[t], r.ends[t] - char)
        if point not in self._wheres:
            self._wheres[point] = self._where(c, t)
        return t, point


def _body(c: _Call) -> list[int]:
    """The ids of a call from its name to the one that closes its arguments."""
    return list(c.r.ids[c.r.tok(c.lay.name[0]) : c.r.tok(c.lay.close) + 1])


def _assistant(
    calls: Sequence[tuple[str, dict[str, Any]]], content: str | None = None
) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls
        ],
    }


def _rounds(
    tools: Sequence[Mapping[str, Any]],
) -> list[list[tuple[Mapping[str, Any], dict[str, Any]]]]:
    """Round r holds every tool's r-th variant, so neighbouring turns differ."""
    per_tool = [(t, variants(t["function"]["parameters"])) for t in tools]
    depth = max(len(v) for _, v in per_tool)
    return [[(t, v[r]) for t, v in per_tool if r < len(v)] for r in range(depth)]


def _unique_prefixes(runs: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """For each run, the fewest leading ids that no other run starts with.

    >>> _unique_prefixes({"a": [1, 2, 3], "b": [1, 2, 4], "c": [5], "d": [1, 2]})
    {'d': 3, 'a': 3, 'b': 3, 'c': 1}
    """
    order = sorted(runs, key=lambda n: list(runs[n]))
    out = {}
    for i, name in enumerate(order):
        run = runs[name]
        shared = 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(order):
                shared = max(shared, len(lcp([run, runs[order[j]]])))
        out[name] = shared + 1
    return out


def _chunks(items: Sequence[Any], n: int) -> list[Sequence[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]
