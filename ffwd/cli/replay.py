"""``ffwd replay``: the command line of `ffwd.bench.replay`.

``ffwd replay --bfcl CATEGORY... [--format FORMAT...] [--tool-choice auto|required]
[--grammar] [--json]`` replays every (category, format) cell. One cell prints
one JSON object (``--json``) or a table; several print one JSON object per
line (``--json``) or one table row per cell. With ``--grammar`` each cell
carries the rows-alone figures beside rows plus grammar.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ffwd.bench.replay import TOOL_CHOICES, replay
from ffwd.templates.choose import Resolved, resolve_template
from ffwd.templates.rows import compile_tools, default_eos_ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ffwd.bench.workloads.bfcl import CATEGORIES
    from ffwd.templates.formats import FORMATS

    parser.add_argument(
        "--bfcl", required=True, nargs="+", choices=CATEGORIES, metavar="CATEGORY",
        help=f"BFCL categories ({', '.join(CATEGORIES)})",
    )
    parser.add_argument("--limit", type=int, default=None, help="first N entries only")
    parser.add_argument(
        "--format", nargs="+", choices=list(FORMATS), default=[None], metavar="FORMAT",
        help=f"tool-call formats ({', '.join(FORMATS)}; default: the model's own, else hermes)",
    )
    parser.add_argument("--chat-template", default=None, metavar="FILE",
                        help="a Jinja chat template to use instead of the tokenizer's own")
    parser.add_argument(
        "--tokenizer", default="default",
        help="default (embedded SmolLM2), gemma3, a HF tokenizer dir or a .gguf",
    )
    parser.add_argument("--tool-choice", choices=TOOL_CHOICES, default="auto")
    parser.add_argument(
        "--grammar", action="store_true",
        help="rows plus the request's grammar (forced tokens), beside rows alone",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (one object per cell)")
    parser.add_argument(
        "--compile-tools", type=int, metavar="N",
        help="time compiling the category's first N distinct tools instead of replaying",
    )


def main(args: argparse.Namespace) -> int:
    from ffwd.bench.workloads.bfcl import load_entries
    from ffwd.models import load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    own = Path(args.chat_template).read_text() if args.chat_template else None
    cells = [(c, f) for c in args.bfcl for f in args.format]
    rows = []
    for category, fmt_arg in cells:
        entries = load_entries(category, args.limit)
        resolved = resolve_template(tokenizer, fmt_arg, own)
        if resolved.format is None:
            print(f"ffwd replay: {resolved.note}", file=sys.stderr)
            return 2
        fmt = resolved.format.name
        head = {"category": category, "format": fmt, "tokenizer": args.tokenizer,
                "tool_choice": args.tool_choice}
        if args.compile_tools:
            out = {**head, **compile_time(entries, tokenizer, resolved, args.tool_choice,
                                          args.compile_tools)}
        else:
            out = {**head, **replay_cell(entries, tokenizer, resolved, args.tool_choice,
                                         args.grammar)}
        rows.append(out)
        if args.json:
            print(json.dumps(out), flush=True)
    if not args.json:
        print(_table(rows[0]) if len(rows) == 1 else _grid(rows))
    return 0


def replay_cell(
    entries: Sequence[Any], tokenizer: Any, resolved: Resolved, tool_choice: str, grammar: bool
) -> dict[str, Any]:
    """One cell's figures; with `grammar`, rows alone (same ground truth) beside them."""
    own = resolved.template  # its format is recognised from it again
    out = replay(entries, tokenizer, None, tool_choice, grammar=grammar,
                 chat_template=own).as_dict()
    if grammar:
        alone = replay(entries, tokenizer, None, tool_choice, schema_order=True,
                       chat_template=own)
        out["rows_alone"] = {
            "fraction": round(alone.fraction, 4),
            "injected": alone.injected,
            "mismatches": alone.mismatches,
        }
    return out


def compile_time(
    entries: Sequence[Any], tokenizer: Any, resolved: Resolved, tool_choice: str, n: int,
    repeat: int = 10,
) -> dict[str, Any]:
    """Wall and CPU milliseconds to compile the entries' first `n` distinct tools."""
    tools: dict[str, Any] = {}
    for entry in entries:
        for tool in entry.tools:
            tools.setdefault(tool["function"]["name"], tool)
    chosen = list(tools.values())[:n]
    if len(chosen) < n:
        raise ValueError(f"--compile-tools {n}: these entries have only {len(chosen)} tools")
    template, fmt = resolved.template, resolved.format
    eos = default_eos_ids(tokenizer)
    wall, cpu, rows = [], [], 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        rows = len(compile_tools(tokenizer, template, chosen, tool_choice, eos, fmt).plan.rows)
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
    if "fraction" not in out:  # --compile-tools
        return "\n".join(f"{k:<18} {v}" for k, v in out.items())
    keys = ["category", "format", "tokenizer", "tool_choice", "entries", "tokens", "injected",
            "fraction", "mismatches", "compile_ms_median"]
    if "rows_alone" in out:
        keys += ["rows_alone", "grammar_rejected", "both_proposed", "disagreements"]
    lines = [f"{k:<12} {out[k]}" for k in keys]
    lines.append("injected by kind:")
    lines += [f"  {kind:<10} {n}" for kind, n in out["by_kind"].items()]
    return "\n".join(lines)


def _grid(rows: list[dict[str, Any]]) -> str:
    """One line per cell: rows alone beside rows plus grammar when both were run."""
    if "fraction" not in rows[0]:
        return "\n".join(json.dumps(r) for r in rows)
    grammar = "rows_alone" in rows[0]
    head = ["category", "format", "entries", "tokens"]
    head += ["rows alone", "rows+grammar", "mismatches", "rejected", "disagree"] if grammar else [
        "fraction", "mismatches"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        cells = [r["category"], r["format"], r["entries"], r["tokens"]]
        if grammar:
            alone = r["rows_alone"]
            cells += [alone["fraction"], r["fraction"], r["mismatches"] + alone["mismatches"],
                      r["grammar_rejected"], r["disagreements"]]
        else:
            cells += [r["fraction"], r["mismatches"]]
        lines.append(" | ".join(str(c) for c in cells))
    return "\n".join(lines)
