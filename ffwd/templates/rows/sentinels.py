"""Sentinel renderings: the request's tools rendered as assistant turns.

Every called tool is rendered several times as an assistant turn: its keys
rotated so that each comes first once, its values drawn from sentinels of the
schema's type so that each key meets every one of them. The turns sit one per
assistant message in a few conversations, each rendered by the template and
tokenized as a whole. The format's ``locate`` finds the characters of the
marker, name, keys and values; token offsets map them to token positions.

``Renderer(tokenizer, template, fmt).renderings(tools) -> Renderings`` does
all of that; the row builders read only the `Call`s it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ffwd.templates.formats import ToolFormat
from ffwd.templates.formats.base import ArgLayout, CallLayout
from ffwd.templates.formats.probe import assistant_message
from ffwd.templates.render import render_chat
from ffwd.templates.rows.align import Text, View, lcp
from ffwd.templates.rows.variants import PROBE_KEY, PROBE_VALUES, rounds, variants
from ffwd.templates.turns import turn_start

TURNS = 64  # calls per rendering (one assistant turn each)
USER = {"role": "user", "content": "Hi"}
PROMPT_ENDINGS = ("Hi", "Is it 5?")  # user turns that end in a letter, in punctuation
CONTENT = "Ok."
HEAD_ID = "call_head"  # the lone call's id, wherever it marks where the turns begin

Job = tuple[str, dict[str, Any]]  # (tool name, arguments) of one rendered call


@dataclass
class Call:
    """One rendered call: its rendering, layout, and where its turn begins and
    where its determined markup must end."""

    r: Text
    tool: str
    lay: CallLayout
    a0: int  # start of its assistant turn
    more: float  # where "another call" and "end of turn" part (inf: one call per turn)
    end: float  # end of the turn's text, or of what is known of it (`last` is False)
    last: bool = True  # no turn follows in this rendering
    # Per span of markup that varies by call (`lay.varying`): its start, and where the
    # determined markup before it ends (the start, or a character earlier where the
    # token touching it is text that may merge with what the model writes there).
    stops: tuple[tuple[int, int], ...] = ()
    # Per argument: where the model's part of its value starts (past an added token
    # the value opens with, Gemma's ``<|"|>``, which nothing merges with).
    values: tuple[int, ...] = ()

    def value_start(self, arg: ArgLayout) -> int:
        return self.values[self.lay.args.index(arg)] if self.values else arg.value_span[0]

    @property
    def clean(self) -> bool:
        """A token starts exactly where the turn starts (the prompt does not merge into it)."""
        i = self.r.tok(self.a0)
        return self.r.starts[i] == self.a0

    @property
    def body(self) -> list[int]:
        """The ids from its name to the one that closes its arguments (but those of
        markup that varies from call to call)."""
        r, varying = self.r, self.lay.varying
        span = range(r.tok(self.lay.name[0]), r.tok(self.lay.close) + 1)
        return [r.ids[i] for i in span
                if not any(r.starts[i] < e and r.ends[i] > s for s, e in varying)]

    def run(self, i: int) -> View:
        """From token `i` to where the call's determined markup must end: before
        the last character "another call" and "end of turn" share, which may merge
        with either (``}}`` beside ``}},``)."""
        return self.view(i, min(self.more - 1, self.end))

    def view(self, i: int, cap: float) -> View:
        """From token `i` up to `cap`, never into markup that varies by call nor into
        an argument's value (Gemma's ``<|"|>`` quote may merge with either side)."""
        at = self.r.starts[i] if i < len(self.r.starts) else float("inf")
        values = (self.value_start(a) for a in self.lay.args if a.value_span[0] >= at)
        cap = min([cap, *(t for s, t in self.stops if s >= at), *values])
        return self.r, i, cap, cap >= self.end and not self.last


@dataclass
class Renderings:
    """What the row builders read: every variant of every tool as a call
    (several turns per rendering), the probe calls (closing shapes only), the
    extra occurrences of a marker (a second call, a call after content), the
    calls that content follows in their turn (Gemma 4 writes a turn's text after
    its calls), and the last ids every generation prompt ends with."""

    calls: list[Call]
    probes: list[Call]
    extras: list[Call]
    trailed: list[Call]
    prompt_tail: list[int]


MakeCall = Callable[..., Call]


class Renderer:
    """Renders and tokenizes sentinel conversations for one template and format."""

    def __init__(self, tokenizer: Any, template: str, fmt: ToolFormat) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError("strict rows need a fast tokenizer (one with character offsets)")
        self.tokenizer = tokenizer
        self.backend = backend
        self.added = frozenset(getattr(tokenizer, "added_tokens_decoder", {}))
        self._calls = 0  # calls rendered so far (each gets its own id)
        self.template = template
        self.fmt = fmt

    def _turn(self, calls: Sequence[Job], content: str | None = None,
              same_as: str | None = None) -> dict[str, Any]:
        """An assistant turn whose call ids no other rendered call has (an id the
        template writes is never common markup), but its first's `same_as`."""
        self._calls += len(calls)
        turn = assistant_message(calls, content, self._calls - len(calls))
        if same_as is not None:
            turn["tool_calls"][0]["id"] = same_as
        return turn

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def render(
        self, conversations: Sequence[list[dict[str, Any]]], tool: Mapping[str, Any]
    ) -> list[Text]:
        texts = [
            render_chat(self.template, m, [tool], False, tokenizer=self.tokenizer)
            for m in conversations
        ]
        out = []
        encoded = self.backend.encode_batch(texts, add_special_tokens=False)
        for text, enc in zip(texts, encoded, strict=True):
            offsets = enc.offsets
            out.append(Text(text, enc.ids, [s for s, _ in offsets], [e for _, e in offsets]))
        return out

    def locate(self, r: Text, calls: Sequence[Job], pos: int) -> list[CallLayout]:
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

    def _stops(self, r: Text, lay: CallLayout) -> tuple[tuple[int, int], ...]:
        """`Call.stops`: a token of the vocabulary's added ones (``[CALL_ID]``) ends
        where it ends; text ending at a varying span may merge with it (``|>`` + id)."""
        out = []
        for s, _ in lay.varying:
            i = r.tok(s - 1) if s > 0 else 0
            held = r.ends[i] == s and r.ids[i] in self.added
            out.append((s, s if held else s - 1))
        return tuple(out)

    def _values(self, r: Text, lay: CallLayout) -> tuple[int, ...]:
        """`Call.values`: each value's start, past the added tokens it opens with."""
        out = []
        for a in lay.args:
            s, i = a.value_span[0], r.tok(a.value_span[0])
            while (i < len(r.ids) and r.starts[i] == s and r.ids[i] in self.added
                   and r.ends[i] < a.value_span[1]):
                s, i = r.ends[i], i + 1
            out.append(s)
        return tuple(out)

    def renderings(self, tools: Sequence[Mapping[str, Any]]) -> Renderings:
        """Every variant of every tool rendered (see `Renderings`)."""
        first = tools[0]
        name0 = first["function"]["name"]
        call0 = (name0, variants(first["function"]["parameters"])[0])
        prompt = render_chat(self.template, [USER], [first], tokenizer=self.tokenizer)
        head_r, *extra_r = self._render_extras(first, call0)
        a0 = turn_start(prompt, head_r.text)
        head = self.locate(head_r, [call0], a0)[0]
        pre = head_r.text[a0 : head.open[0]]  # what a turn writes before its first marker
        turn_len = len(head_r.text) - head.close
        # A turn that another turn follows may end in a token merged with the next
        # one: there, the turn's last token (as the lone rendering has it) is unknown.
        inner_len = head_r.starts[head_r.tok(len(head_r.text) - 1)] - head.close
        delta = _close_delta(head_r, head, extra_r)

        tail = head_r.text[head.close :]

        def call(r: Text, name: str, lay: CallLayout, start: int, last: bool = True) -> Call:
            more = lay.close + delta if delta is not None else float("inf")
            # An earlier turn may end otherwise than the last one does (Nemotron's
            # "</TOOLCALL>\n<SPECIAL_12>\n"): from the last character they share (it
            # may merge with what follows), it has no say.
            here = r.text[lay.close : lay.close + turn_len]
            shared = _shared(tail, here)
            inner = inner_len if shared == len(tail) else min(inner_len, shared - 1)
            end = lay.close + (turn_len if last else inner)
            return Call(r, name, lay, start, more, end, last, self._stops(r, lay),
                        self._values(r, lay))

        extras: list[Call] = []
        trailed: list[Call] = []
        for r, (calls, content) in zip(extra_r, _extra_specs(call0), strict=False):
            try:
                lays = self.locate(r, calls, a0)
            except ValueError:
                continue  # a template may drop calls beside content (DeepSeek R1's)
            extras.extend(call(r, name0, lay, a0) for lay in lays)
            if content and r.text.find(content, lays[-1].close) >= 0:
                trailed.append(extras[-1])
        jobs = [(t["function"]["name"], args) for round_ in rounds(tools) for t, args in round_]
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
            if head_call.body == out[0].body:
                break
        else:
            raise ValueError("the chat template renders calls differently in longer conversations")
        split = len(out) - len(PROBE_VALUES)
        return Renderings([head_call, *out[:split]], out[split:], extras, trailed,
                          self._prompt_tail(first))

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
        self, jobs: Sequence[Job], head: Job, tool: Mapping[str, Any], turns: int, users: bool,
        opening: str, pre: str, call: MakeCall,
    ) -> list[Call]:
        """Render the jobs `turns` per conversation, one call per assistant turn
        (with a user turn before each when `users`). Each conversation opens with
        the lone rendering's call, which marks where the turns begin (the system
        prompt may quote the markers too)."""
        out: list[Call] = []
        chunks = [jobs[i : i + turns] for i in range(0, len(jobs), turns)]
        conversations = []
        for chunk in chunks:
            messages: list[dict[str, Any]] = [USER, self._turn([head], None, HEAD_ID)]
            for job in chunk:
                turn = self._turn([job])
                messages += [USER, turn] if users else [turn]
            conversations.append(messages)
        for chunk, r in zip(chunks, self.render(conversations, tool), strict=True):
            pos = r.text.find(opening)
            if pos < 0:
                raise ValueError(
                    "the chat template renders a call differently in a longer conversation"
                )
            layouts = self.locate(r, [head, *chunk], pos)[1:]
            for i, ((name, _), lay) in enumerate(zip(chunk, layouts, strict=True)):
                start = lay.open[0] - len(pre)
                if r.text[start : lay.open[0]] != pre or start <= pos:
                    raise ValueError("the chat template renders later turns differently")
                out.append(call(r, name, lay, start, last=i + 1 == len(chunk)))
                pos = lay.close
        return out

    def _render_extras(self, tool: Mapping[str, Any], call0: Job) -> list[Text]:
        """The lone call, then (where the template allows) two calls in one turn
        and a call after content; the first call is `HEAD_ID` in each, so that
        they part where the turns do (`_close_delta`)."""
        out = self.render([[USER, self._turn([call0], None, HEAD_ID)]], tool)
        for calls, content in _extra_specs(call0):
            if len(calls) > 1 and not self.fmt.parallel:
                break
            try:
                out += self.render([[USER, self._turn(calls, content, HEAD_ID)]], tool)
            except ValueError:
                break
        return out


def _extra_specs(call0: Job) -> list[tuple[list[Job], str | None]]:
    return [([call0, call0], None), ([call0], CONTENT)]


def _close_delta(single: Text, head: CallLayout, extras: list[Text]) -> int | None:
    """Characters from the closing commit to where "another call" and "end of turn"
    part ways; None when a turn carries one call."""
    if not extras:
        return None
    return _shared(single.text, extras[0].text) - head.close


def _shared(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))
