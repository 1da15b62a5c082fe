"""``ffwd replay``: a model-free, exact measure of what the strict tier saves.

Each BFCL entry's first ground-truth call is rendered as the assistant turn
with the chosen format's template; the whole rendering is tokenized and the
assistant ids are pushed through a `FillSession` as if sampled (after
`FillSession.start`, which a forced tool choice can answer). When a row
fires, its ids are compared with the next ground-truth ids: equal ids are
injected (skipped), a difference is a **mismatch** (a bug in the rows).

``replay(entries, tokenizer, fmt=None, tool_choice="auto", grammar=False)``
(a `ReplayResult`) is the library form (``replay_turn`` replays any one assistant message);
`ffwd.cli.replay` is the command line: one JSON object per cell with
``--json`` (``entries, tokens, injected, fraction, mismatches, by_kind``) or
a table. The assistant ids run through the first EOS; when the prompt's last
token merges with the turn (its ids are not a prefix of the whole
rendering's), the turn is tokenized on its own, as a model continuing the
prompt would write it.

``--grammar`` adds the request's grammar (`ffwd.grammar`) as the session's
``grammar`` source: after the strict rows, the ids the grammar forces are
compared with the ground truth in the same way. The ground truth is then
replayed with its arguments in schema order (the only order a grammar lets a
model write), and the output sets the rows-alone figures beside rows plus
grammar (``rows_alone``), counts the entries whose ground truth the grammar
refuses (``grammar_rejected``, replayed with rows alone) and the positions
where rows and grammar both propose but differ (``disagreements``).
Several ``--bfcl`` categories or ``--format`` names print one line (or JSON
object) per cell.

``--compile-tools N`` times compiling the category's first N distinct tools
instead (wall and CPU milliseconds over 10 runs).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ffwd.fill import FILL_KINDS, FillPlan, FillRow, FillSession, Proposal
from ffwd.grammar import GrammarConstraint, RequestGrammars
from ffwd.templates.choose import resolve_template
from ffwd.templates.render import render_chat
from ffwd.templates.rows import CompiledTools, compile_tools, default_eos_ids
from ffwd.templates.turns import turn_start

TOOL_CHOICES = ("auto", "required")


@dataclass
class ReplayResult:
    entries: int = 0
    tokens: int = 0
    injected: int = 0
    mismatches: int = 0
    by_kind: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((*FILL_KINDS, "grammar"), 0)
    )
    grammar_rejected: int = 0  # entries whose ground truth the grammar refuses
    both_proposed: int = 0  # positions where rows and grammar both propose
    disagreements: int = 0  # ... and their ids differ where both have one
    compile_ms: list[float] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)  # first few mismatches

    @property
    def fraction(self) -> float:
        return self.injected / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        ms = sorted(self.compile_ms)
        return {
            "entries": self.entries,
            "tokens": self.tokens,
            "injected": self.injected,
            "fraction": round(self.fraction, 4),
            "mismatches": self.mismatches,
            "by_kind": dict(self.by_kind),
            "grammar_rejected": self.grammar_rejected,
            "both_proposed": self.both_proposed,
            "disagreements": self.disagreements,
            "compile_ms_median": round(ms[len(ms) // 2], 2) if ms else 0.0,
            "mismatch_examples": self.examples,
        }


def assistant_ids(tokenizer: Any, prompt: str, full: str, eos: Iterable[int]) -> list[int]:
    """The ids the model would write after `prompt` to produce `full`, through EOS.

    Sliced from the whole rendering's ids; when the prompt's last token merges
    with the turn (the prompt's ids are not a prefix), or the prompt opens what
    the turn shows closed (`ffwd.templates.turns`), the turn is encoded alone.
    """
    a0 = turn_start(prompt, full)
    p = tokenizer.encode(prompt, add_special_tokens=False)
    f = tokenizer.encode(full, add_special_tokens=False)
    ids = (
        f[len(p) :]
        if a0 == len(prompt) and f[: len(p)] == p
        else tokenizer.encode(full[a0:], add_special_tokens=False)
    )
    stop = set(eos)
    for i, tok in enumerate(ids):
        if tok in stop:
            return ids[: i + 1]
    return ids


def kind_of(plan: FillPlan, context: Any, tail: Sequence[int], ids: Sequence[int]) -> str:
    """The kind of the row that proposed `ids` (possibly clamped) after `tail`:
    the one `StrictRowSource` picks, the longest trigger the context allows."""
    best: FillRow | None = None
    for row in plan.rows:
        t = row.trigger
        if row.emit[: len(ids)] != tuple(ids) or tuple(tail[len(tail) - len(t) :]) != t:
            continue
        if row.requires_context and not context.allows(row):
            continue
        if best is None or len(t) > len(best.trigger):
            best = row
    return best.kind if best is not None else "scaffold"


def replay_one(
    plan: FillPlan,
    context: Any,
    prompt_ids: Sequence[int],
    truth: Sequence[int],
    result: ReplayResult,
    grammar: GrammarConstraint | None = None,
) -> None:
    """Push `truth` through a session; count what the rows (and the grammar)
    inject and every mismatch."""
    if grammar is not None and grammar.admit(truth) != len(truth):
        result.grammar_rejected += 1
        grammar = None
    session = FillSession(plan, prompt_ids, strict_context=context, grammar=grammar)
    proposal: Proposal | None = session.start()
    i = 0
    while True:
        if grammar is not None:
            _compare(session, grammar, result)
        if proposal is not None:
            kind = (
                "grammar" if proposal.origin == "grammar"
                else kind_of(plan, context, [*prompt_ids, *truth[:i]], proposal.ids)
            )
            i += _settle(session, proposal, truth, i, kind, result)
        if i >= len(truth):
            break
        proposal = session.push(truth[i])
        i += 1
    result.tokens += len(truth)


def _compare(session: FillSession, grammar: GrammarConstraint, result: ReplayResult) -> None:
    """Where rows and grammar both propose here, their ids must agree (as far as both go)."""
    rows = session.sources[0].propose(session)
    forced = grammar.propose(session)
    if rows is None or forced is None:
        return
    result.both_proposed += 1
    n = min(len(rows.ids), len(forced.ids))
    if rows.ids[:n] != forced.ids[:n]:
        result.disagreements += 1
        if len(result.examples) < 5:
            result.examples.append({"rows": list(rows.ids), "grammar": list(forced.ids)})


def _settle(
    session: FillSession,
    proposal: Proposal,
    truth: Sequence[int],
    i: int,
    kind: str,
    result: ReplayResult,
) -> int:
    """Commit `proposal` if the ground truth continues with it; return the ids it covers."""
    n = len(proposal.ids)
    if tuple(truth[i : i + n]) == proposal.ids:
        session.commit(proposal, n)
        result.injected += n
        result.by_kind[kind] += n
        return n
    session.commit(proposal, 0)
    result.mismatches += 1
    if len(result.examples) < 5:
        result.examples.append(
            {"at": i, "proposed": list(proposal.ids), "truth": list(truth[i : i + n])}
        )
    return 0


def replay_turn(
    compiled: CompiledTools,
    template: str,
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    answer: Mapping[str, Any],
    result: ReplayResult,
    grammar: GrammarConstraint | None = None,
) -> None:
    """Replay one assistant message `answer` after `messages` (any calls, any content)."""
    prompt = render_chat(template, messages, tools, tokenizer=tokenizer)
    full = render_chat(
        template, [*messages, answer], tools, add_generation_prompt=False, tokenizer=tokenizer
    )
    truth = assistant_ids(tokenizer, prompt, full, compiled.plan.eos)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    replay_one(compiled.plan, compiled.new_context(), prompt_ids, truth, result, grammar)
    result.entries += 1


def replay(
    entries: Iterable[Any],
    tokenizer: Any,
    fmt: str | None = None,
    tool_choice: str = "auto",
    grammar: bool = False,
    schema_order: bool = False,
    chat_template: str | None = None,
) -> ReplayResult:
    """Replay each entry's first ground-truth call (see the module docstring);
    `schema_order` puts its arguments in the order the tool's schema lists them;
    `chat_template` stands for the tokenizer's own template."""
    resolved = resolve_template(tokenizer, fmt, chat_template)
    if resolved.format is None:
        raise ValueError(resolved.note)
    template, fmt_name = resolved.template, resolved.format
    eos = default_eos_ids(tokenizer)
    grammars = (
        RequestGrammars(tokenizer, template, fmt_name, len(tokenizer), eos) if grammar else None
    )
    result = ReplayResult()
    for entry in entries:
        t0 = time.perf_counter()
        compiled = compile_tools(tokenizer, template, entry.tools, tool_choice, eos, fmt_name)
        result.compile_ms.append((time.perf_counter() - t0) * 1000)
        args = entry.call.arguments
        if schema_order or grammar:
            args = in_schema_order(args, entry.tools, entry.call.name)
        call = {"type": "function", "function": {"name": entry.call.name, "arguments": args}}
        answer = {"role": "assistant", "content": None, "tool_calls": [call]}
        constraint = grammars.for_request(entry.tools, tool_choice) if grammars else None
        replay_turn(
            compiled, template, tokenizer, entry.messages, entry.tools, answer, result, constraint
        )
    return result


def in_schema_order(
    args: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], name: str
) -> dict[str, Any]:
    """`args` with the keys the tool's schema lists first, in its order, then the rest.

    >>> tools = [{"function": {"name": "f", "parameters": {"properties": {"a": {}, "b": {}}}}}]
    >>> in_schema_order({"b": 1, "z": 2, "a": 3}, tools, "f")
    {'a': 3, 'b': 1, 'z': 2}
    """
    fn: Mapping[str, Any] = next(
        (t["function"] for t in tools if t["function"]["name"] == name), {}
    )
    props = list((fn.get("parameters") or {}).get("properties") or {})
    ordered = {k: args[k] for k in props if k in args}
    return {**ordered, **{k: v for k, v in args.items() if k not in ordered}}
