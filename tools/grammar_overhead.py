"""Micro-benchmark: what the grammar costs per token on BFCL tools.

    python -m tools.grammar_overhead [--bfcl multiple simple_python]
        [--format hermes ...] [--limit N] [--tool-choice required|auto] [--json]

For every entry, the request's grammar is built (``tool_choice`` required by
default) and the ground-truth call, rendered by the format's template and
tokenized whole, is decoded as the loop would: per token, the **mask** for
the next id (`GrammarConstraint.mask` on a float32 logits row as wide as the
vocabulary: the matcher consuming the previous id, the bitmask, applying it)
and the **forced tokens** after it (``observe`` + ``propose``:
``compute_ff_tokens``). Reports microseconds per token, p50 and p99, per
format, plus the median grammar compile time (cold, per distinct request).
Model-free: the logits are random, the timings are llguidance's and ours.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from ffwd.bench.replay import assistant_ids, in_schema_order
from ffwd.bench.workloads.bfcl import CATEGORIES, load_entries
from ffwd.grammar import RequestGrammars
from ffwd.templates.choose import resolve_template
from ffwd.templates.formats import FORMATS
from ffwd.templates.render import render_chat
from ffwd.templates.rows import default_eos_ids
from ffwd.templates.tools import normalize_tools


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile by nearest rank.

    >>> percentile([1, 2, 3, 4], 0.5), percentile([1, 2, 3, 4], 0.99)
    (2, 4)
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def measure(
    tokenizer: Any, fmt: str, entries: Sequence[Any], tool_choice: str = "required"
) -> dict[str, Any]:
    """Per-token mask and forced-token microseconds for one format over `entries`."""
    resolved = resolve_template(tokenizer, fmt)
    template, name = resolved.template, resolved.format_name
    eos = default_eos_ids(tokenizer)
    grammars = RequestGrammars(tokenizer, template, resolved.format, len(tokenizer), eos)
    logits = torch.randn(len(tokenizer), generator=torch.Generator().manual_seed(0))
    mask_us: list[float] = []
    forced_us: list[float] = []
    compile_ms: list[float] = []
    for entry in entries:
        tools = normalize_tools(entry.tools)
        t0 = time.perf_counter()
        grammars.grammar(tools, tool_choice, True, None)
        compile_ms.append((time.perf_counter() - t0) * 1000)
        constraint = grammars.for_request(tools, tool_choice)
        assert constraint is not None
        truth = _truth_ids(tokenizer, template, entry, tools, eos)
        out: list[int] = []
        for tok in truth:
            t0 = time.perf_counter()
            constraint.mask(logits, out)
            t1 = time.perf_counter()
            out.append(tok)
            constraint.observe([tok])
            constraint.propose(constraint)  # type: ignore[arg-type]
            t2 = time.perf_counter()
            mask_us.append((t1 - t0) * 1e6)
            forced_us.append((t2 - t1) * 1e6)
    total = [m + f for m, f in zip(mask_us, forced_us, strict=True)]
    return {
        "format": name,
        "entries": len(entries),
        "tokens": len(total),
        "mask_us_p50": round(percentile(mask_us, 0.5), 1),
        "mask_us_p99": round(percentile(mask_us, 0.99), 1),
        "forced_us_p50": round(percentile(forced_us, 0.5), 1),
        "forced_us_p99": round(percentile(forced_us, 0.99), 1),
        "total_us_p50": round(percentile(total, 0.5), 1),
        "total_us_p99": round(percentile(total, 0.99), 1),
        "compile_ms_median": round(percentile(compile_ms, 0.5), 2),
    }


def _truth_ids(
    tokenizer: Any, template: str, entry: Any, tools: list[dict[str, Any]], eos: Sequence[int]
) -> list[int]:
    args = in_schema_order(entry.call.arguments, tools, entry.call.name)
    call = {"type": "function", "function": {"name": entry.call.name, "arguments": args}}
    answer = {"role": "assistant", "content": None, "tool_calls": [call]}
    prompt = render_chat(template, entry.messages, tools, tokenizer=tokenizer)
    full = render_chat(template, [*entry.messages, answer], tools, False, tokenizer=tokenizer)
    return assistant_ids(tokenizer, prompt, full, eos)


def main(argv: Sequence[str] | None = None) -> int:
    from ffwd.models import load_tokenizer

    p = argparse.ArgumentParser(prog="python -m tools.grammar_overhead",
                                description=__doc__.splitlines()[0])
    p.add_argument("--bfcl", nargs="+", choices=CATEGORIES, default=["multiple", "simple_python"])
    p.add_argument("--format", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    p.add_argument("--limit", type=int, default=None, help="first N entries per category")
    p.add_argument("--tool-choice", choices=("required", "auto"), default="required")
    p.add_argument("--tokenizer", default="default")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer)
    entries = [e for c in args.bfcl for e in load_entries(c, args.limit)]
    torch.set_num_threads(1)  # the sampler's share of one decode step
    for fmt in args.format:
        out = {"bfcl": args.bfcl, **measure(tokenizer, fmt, entries, args.tool_choice)}
        print(json.dumps(out) if args.json else "  ".join(f"{k}={v}" for k, v in out.items()),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
