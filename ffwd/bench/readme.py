"""The performance tables of docs/performance.md from ``ffwd bench`` result directories.

    python -m ffwd.bench.readme DIR [DIR ...] [--readme docs/performance.md] [--plot PNG]

Each DIR is an ``ffwd bench --out DIR`` (its ``results.json``). For every run,
in the order given: the command, the machine and load averages, what each
kind of system was built as (llama.cpp's build lines), one table of decode
tokens/s per workload and system with the speedup over that run's
``ffwd-off``, one of end-to-end tokens/s and tool-call parse rates, the
prefill rows (time to first token) and the contention row where they ran, and
the greedy identity checks. Ratios are only ever taken within one run (its
systems were interleaved); runs are shown side by side, never mixed.

Prints the Markdown; with ``--readme`` it replaces what stands between
`START` and `END` in that file instead. ``--plot`` redraws the first run's
speedup chart (`report.plot`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ffwd.bench import contention, latency, report

START = "<!-- ffwd bench: start (python -m ffwd.bench.readme writes this) -->"
END = "<!-- ffwd bench: end -->"
LABELS = {"tools/required": "tools, `tool_choice=required`", "tools/auto": "tools, `auto`",
          "echo": "echo (code edits, re-quotes)", "prose": "prose",
          "agent": "agent (multi-turn tool conversations)",
          "repeat": "repeat (the same request, file or call again)"}


def _label(workload: str) -> str:
    return LABELS.get(workload, workload)


def decode_table(summary: Mapping[str, Any], sp: Mapping[str, Any]) -> list[str]:
    """Decode tok/s per workload (rows) and system (columns), speedup vs ffwd-off after it.

    >>> s = {"prose": {"ffwd-off": {"tokens_per_s": 100.0}, "x": {"tokens_per_s": 150.0}}}
    >>> decode_table(s, report.speedups(s))[2]
    '| prose | 100.0 | 150.0 (1.50×) |'
    """
    names = list(dict.fromkeys(n for rows in summary.values() for n in rows))
    lines = ["| workload | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for workload, rows in summary.items():
        cells = []
        for name in names:
            m, vs = rows.get(name), sp[workload].get(name, {}).get(report.BASELINE)
            cell = "—" if m is None else f"{m['tokens_per_s']:.1f}"
            cells.append(cell if vs is None or name == report.BASELINE else f"{cell} ({vs:.2f}×)")
        lines.append(f"| {_label(workload)} | " + " | ".join(cells) + " |")
    return lines


def e2e_table(summary: Mapping[str, Any]) -> list[str]:
    """End-to-end tok/s (HTTP, prefill included), first-token s and parse rate per cell."""
    names = list(dict.fromkeys(n for rows in summary.values() for n in rows))
    lines = ["| workload | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for workload, rows in summary.items():
        cells = []
        for name in names:
            m = rows.get(name)
            if m is None:
                cells.append("—")
                continue
            parse = "" if m.get("parse_rate") is None else f", parse {m['parse_rate']:.0%}"
            cells.append(f"{m.get('e2e_tokens_per_s', 0.0):.1f} · "
                         f"{m.get('first_token_seconds', 0.0):.3f} s{parse}")
        lines.append(f"| {_label(workload)} | " + " | ".join(cells) + " |")
    return lines


def _load(avg: Sequence[float]) -> str:
    return " ".join(f"{x:.2f}" for x in avg)


def section(runs: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown of every run, in order."""
    out: list[str] = []
    for results in runs:
        env, settings = results["environment"], results["settings"]
        summary, sp = results["summary"], results["speedups"]
        out += [
            f"One run of `{settings['command']}` ({env['model']}, ffwd systems on "
            f"{env.get('backend', 'transformers')}, weights {env['dtype']}, "
            f"{env['threads']} threads on {env['cpu']}; {settings['repeats']} interleaved "
            f"repeats; load average {_load(env['load_before'])} before, "
            f"{_load(env['load_after'])} after). "
            "Decode tokens/s after prefill, speedup vs `ffwd-off` in brackets:", "",
            *decode_table(summary, sp), "",
            "End to end (tokens/s over whole requests: prefill, serving and HTTP included) · "
            "first-token latency · tool-call parse rate:", "",
            *e2e_table(summary), "",
            *_extra_rows(results),
            *report.correctness_lines(results["correctness"]), "",
            "Builds:", "", *report.build_lines(env), *report.fallback_note(env),
            *report.attention_lines(env), "",
        ]
    return "\n".join(out).rstrip() + "\n"


def _extra_rows(results: Mapping[str, Any]) -> list[str]:
    """The prefill and contention tables, where the run has them."""
    out: list[str] = []
    if results.get("prefill"):
        out += ["Prefill: time to first token. " + latency.EXPLAIN, "",
                *latency.markdown(results["prefill"]), ""]
    if results.get("contention"):
        out += ["Contention (`ffwd bench --workload contention`): "
                + contention.markdown(results["contention"])[0], "",
                *contention.markdown(results["contention"])[2:], ""]
    return out


def replace_between(text: str, body: str) -> str:
    """`text` with what stands between the START and END markers replaced by `body`."""
    if START not in text or END not in text:
        raise ValueError(f"the markers {START!r} and {END!r} are not both there")
    head, rest = text.split(START, 1)
    return f"{head}{START}\n{body}{END}{rest.split(END, 1)[1]}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ffwd.bench.readme", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path, help="ffwd bench --out directories")
    p.add_argument("--readme", type=Path, help="rewrite this file's marked section")
    p.add_argument("--plot", type=Path, help="redraw the first run's chart here")
    args = p.parse_args(argv)
    runs = [json.loads((d / "results.json").read_text()) for d in args.dirs]
    body = section(runs)
    if args.readme:
        args.readme.write_text(replace_between(args.readme.read_text(), body))
    else:
        sys.stdout.write(body)
    if args.plot:
        report.plot(runs[0]["summary"], runs[0]["speedups"], args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
