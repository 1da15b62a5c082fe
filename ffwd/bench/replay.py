"""``ffwd replay``: a model-free, exact measure of what the strict tier saves.

Each BFCL entry's first ground-truth call is rendered as the assistant turn
with the chosen format's template; the whole rendering is tokenized and the
assistant ids are pushed through a `FillSession` as if sampled (after
`FillSession.start`, which a forced tool choice can answer). When a row
fires, its ids are compared with the next ground-truth ids: equal ids are
injected (skipped), a difference is a **mismatch** (a bug in the rows).

``replay(entries, tokenizer, fmt=None, tool_choice="auto") -> ReplayResult``
is the library form (``replay_turn`` replays any one assistant message);
``main`` prints one JSON object with ``--json`` (``entries, tokens, injected,
fraction, mismatches, by_kind``) or a table. The assistant ids run through
the first EOS; when the prompt's last token merges with the turn (its ids are
not a prefix of the whole rendering's), the turn is tokenized on its own, as a
model continuing the prompt would write it.

``--compile-tools N`` times compiling the category's first N distinct tools
instead (wall and CPU milliseconds over 10 runs).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ffwd.fill import FILL_KINDS, FillPlan, FillRow, FillSession, Proposal
from ffwd.templates.render import render_chat, resolve_template
from ffwd.templates.rows import CompiledTools, compile_plan, compile_tools, default_eos_ids

TOOL_CHOICES = ("auto", "required")


@dataclass
class ReplayResult:
    entries: int = 0
    tokens: int = 0
    injected: int = 0
    mismatches: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FILL_KINDS, 0))
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
            "compile_ms_median": round(ms[len(ms) // 2], 2) if ms else 0.0,
            "mismatch_examples": self.examples,
        }


def assistant_ids(tokenizer: Any, prompt: str, full: str, eos: Iterable[int]) -> list[int]:
    """The ids the model would write after `prompt` to produce `full`, through EOS.

    Sliced from the whole rendering's ids; when the prompt's last token merges
    with the turn (the prompt's ids are not a prefix), the turn is encoded alone.
    """
    if not full.startswith(prompt):
        raise ValueError("the rendering with the answer does not start with the prompt")
    p = tokenizer.encode(prompt, add_special_tokens=False)
    f = tokenizer.encode(full, add_special_tokens=False)
    ids = (
        f[len(p) :]
        if f[: len(p)] == p
        else tokenizer.encode(full[len(prompt) :], add_special_tokens=False)
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
) -> None:
    """Push `truth` through a session; count what the rows inject and every mismatch."""
    session = FillSession(plan, prompt_ids, strict_context=context)
    proposal: Proposal | None = session.start()
    i = 0
    while True:
        if proposal is not None:
            kind = kind_of(plan, context, [*prompt_ids, *truth[:i]], proposal.ids)
            i += _settle(session, proposal, truth, i, kind, result)
        if i >= len(truth):
            break
        proposal = session.push(truth[i])
        i += 1
    result.tokens += len(truth)


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
) -> None:
    """Replay one assistant message `answer` after `messages` (any calls, any content)."""
    prompt = render_chat(template, messages, tools, tokenizer=tokenizer)
    full = render_chat(
        template, [*messages, answer], tools, add_generation_prompt=False, tokenizer=tokenizer
    )
    truth = assistant_ids(tokenizer, prompt, full, compiled.plan.eos)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    replay_one(compiled.plan, compiled.new_context(), prompt_ids, truth, result)
    result.entries += 1


def replay(
    entries: Iterable[Any], tokenizer: Any, fmt: str | None = None, tool_choice: str = "auto"
) -> ReplayResult:
    """Replay each entry's first ground-truth call (see the module docstring)."""
    template, fmt_name = resolve_template(tokenizer, fmt)
    eos = default_eos_ids(tokenizer)
    result = ReplayResult()
    for entry in entries:
        t0 = time.perf_counter()
        compiled = compile_tools(tokenizer, template, entry.tools, tool_choice, eos, fmt_name)
        result.compile_ms.append((time.perf_counter() - t0) * 1000)
        call = {
            "type": "function",
            "function": {"name": entry.call.name, "arguments": entry.call.arguments},
        }
        answer = {"role": "assistant", "content": None, "tool_calls": [call]}
        replay_turn(compiled, template, tokenizer, entry.messages, entry.tools, answer, result)
    return result


# --- command line ---------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ffwd.bench.bfcl import CATEGORIES
    from ffwd.templates.formats import FORMATS

    parser.add_argument(
        "--bfcl",
        required=True,
        choices=CATEGORIES,
        metavar="CATEGORY",
        help=f"BFCL category ({', '.join(CATEGORIES)})",
    )
    parser.add_argument("--limit", type=int, default=None, help="first N entries only")
    parser.add_argument(
        "--format",
        choices=list(FORMATS),
        default=None,
        help="tool-call format (default: the model's own, else hermes)",
    )
    parser.add_argument(
        "--tokenizer",
        default="default",
        help="default (embedded SmolLM2), gemma3, a HF tokenizer dir or a .gguf",
    )
    parser.add_argument("--tool-choice", choices=TOOL_CHOICES, default="auto")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--compile-tools",
        type=int,
        metavar="N",
        help="time compiling the category's first N distinct tools instead of replaying",
    )


def main(args: argparse.Namespace) -> int:
    from ffwd.bench.bfcl import load_entries
    from ffwd.models import load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    entries = load_entries(args.bfcl, args.limit)
    _, fmt = resolve_template(tokenizer, args.format)
    head = {
        "category": args.bfcl,
        "format": fmt,
        "tokenizer": args.tokenizer,
        "tool_choice": args.tool_choice,
    }
    if args.compile_tools:
        out = {
            **head,
            **compile_time(entries, tokenizer, fmt, args.tool_choice, args.compile_tools),
        }
        print(json.dumps(out) if args.json else "\n".join(f"{k:<18} {v}" for k, v in out.items()))
        return 0
    out = {**head, **replay(entries, tokenizer, fmt, args.tool_choice).as_dict()}
    print(json.dumps(out) if args.json else _table(out))
    return 0


def compile_time(
    entries: Sequence[Any], tokenizer: Any, fmt: str, tool_choice: str, n: int, repeat: int = 10
) -> dict[str, Any]:
    """Wall and CPU milliseconds to compile the entries' first `n` distinct tools."""
    tools: dict[str, Any] = {}
    for entry in entries:
        for tool in entry.tools:
            tools.setdefault(tool["function"]["name"], tool)
    chosen = list(tools.values())[:n]
    if len(chosen) < n:
        raise ValueError(f"--compile-tools {n}: these entries have only {len(chosen)} tools")
    template, _ = resolve_template(tokenizer, fmt)
    eos = default_eos_ids(tokenizer)
    wall, cpu, rows = [], [], 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        rows = len(compile_plan(tokenizer, template, chosen, tool_choice, eos, fmt).rows)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    wall.sort()
    return {
        "tools": n,
        "rows": rows,
        "repeat": repeat,
        "wall_ms_min": round(wall[0], 1),
        "wall_ms_median": round(wall[repeat // 2], 1),
        "cpu_ms_min": round(min(cpu), 1),
    }


def _table(out: dict[str, Any]) -> str:
    lines = [
        f"{k:<12} {out[k]}"
        for k in (
            "category",
            "format",
            "tokenizer",
            "tool_choice",
            "entries",
            "tokens",
            "injected",
            "fraction",
            "mismatches",
            "compile_ms_median",
        )
    ]
    lines.append("injected by kind:")
    lines += [f"  {kind:<10} {n}" for kind, n in out["by_kind"].items()]
    return "\n".join(lines)
