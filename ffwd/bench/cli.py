"""``ffwd bench``: every system on the same prompts, interleaved, then a report.

    ffwd bench [--workload tools|echo|prose|all] [--limit N] [--systems LIST]
               [--model default|PATH] [--repeats R] [--out DIR] [--json] [--quick]

One model is loaded once (float32 unless ``--dtype``); all systems share it,
its thread count and the prompt ids the service renders. Each system first
runs one short untimed warm-up; then every (repeat, item) runs all systems
back to back, starting from a different system each time (`schedule`), so
machine noise lands on all alike. Writes ``DIR/results.json`` (environment,
settings, every run, outputs, summary, speedups, correctness, replay bound,
targets), ``DIR/report.md`` and ``DIR/speedup.png``; ``--json`` also prints
the results to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from ffwd.bench import report
from ffwd.bench.systems import (
    ALL_SYSTEMS,
    EXTRA_SYSTEMS,
    Outcome,
    System,
    chat_request,
    parses,
)
from ffwd.bench.workloads import DEFAULT_BFCL, WORKLOADS, Item

DEFAULT_LIMIT, QUICK_LIMIT = 4, 1
DEFAULT_REPEATS, QUICK_REPEATS = 3, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=(*WORKLOADS, "all"), default="all")
    parser.add_argument("--limit", type=int, default=None,
                        help=f"entries per BFCL category, edits and re-quotes, prose questions "
                             f"(default {DEFAULT_LIMIT}; --quick {QUICK_LIMIT})")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                        help="comma-separated, from: " + ", ".join((*ALL_SYSTEMS, *EXTRA_SYSTEMS)))
    parser.add_argument("--model", default="default", help="default, a HF directory or a .gguf")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"runs of every item and system (default {DEFAULT_REPEATS}; "
                             f"--quick {QUICK_REPEATS})")
    parser.add_argument("--out", default="ffwd-bench", help="output directory")
    parser.add_argument("--bfcl", action="append", default=None, metavar="CATEGORY",
                        help=f"BFCL category for tools (repeatable; default "
                             f"{' + '.join(DEFAULT_BFCL)})")
    parser.add_argument("--seed", type=int, default=0, help="echo and prose selection")
    parser.add_argument("--dtype", default="float32",
                        help="float32 (default: greedy identity is exact), bfloat16 or auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--quick", action="store_true",
                        help="a small slice with short outputs (a few minutes)")
    parser.add_argument("--json", action="store_true", help="print results.json to stdout")


def schedule(n_items: int, systems: Sequence[str], repeats: int) -> list[tuple[int, int, str]]:
    """``(repeat, item, system)`` in run order: per item all systems back to back,
    the first one rotating with the item and the repeat."""
    out = []
    for r in range(repeats):
        for i in range(n_items):
            k = (r + i) % len(systems)
            out += [(r, i, name) for name in (*systems[k:], *systems[:k])]
    return out


def record(item: Item, system: str, repeat: int, o: Outcome) -> dict[str, Any]:
    """One run as a JSON-able row (see `report.summarize`)."""
    return {
        "workload": item.workload, "item": item.id, "kind": item.kind, "system": system,
        "repeat": repeat, "tokens": o.tokens, "seconds": round(o.seconds, 4),
        "prefill_seconds": round(o.prefill_seconds, 4),
        "forward_calls": o.forward_calls, "injected": o.injected,
        "verify_accepted": o.verify_accepted, "verify_rejected": o.verify_rejected,
        "parsed": parses(o, item) if item.workload.startswith("tools") else None,
    }


def identity(
    items: Sequence[Item], outputs: Mapping[str, Mapping[str, Any]], a: str, b: str
) -> dict[str, tuple[int, int]]:
    """Per workload: (items where `a` and `b` wrote the same content and calls, items compared)."""
    out: dict[str, tuple[int, int]] = {}
    for item in items:
        pair = outputs.get(item.key, {})
        if a not in pair or b not in pair:
            continue
        same, n = out.get(item.workload, (0, 0))
        out[item.workload] = (same + (pair[a] == pair[b]), n + 1)
    return out


def main(args: argparse.Namespace) -> int:
    try:
        names = _system_names(args.systems)
        limit = args.limit or (QUICK_LIMIT if args.quick else DEFAULT_LIMIT)
        repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
        if limit < 1 or repeats < 1:
            raise ValueError("--limit and --repeats must be at least 1")
    except ValueError as exc:
        print(f"ffwd bench: {exc}", file=sys.stderr)
        return 2
    results = run_bench(args, names, limit, repeats)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    (out / "report.md").write_text(report.render_markdown(results))
    report.plot(results["summary"], results["speedups"], out / "speedup.png")
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
    else:
        print(f"wrote {out / 'results.json'}, {out / 'report.md'}, {out / 'speedup.png'}",
              file=sys.stderr)
    return 0


def _system_names(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in (*ALL_SYSTEMS, *EXTRA_SYSTEMS)]
    if unknown or not names:
        known = ", ".join((*ALL_SYSTEMS, *EXTRA_SYSTEMS))
        raise ValueError(f"--systems {raw!r}: expected some of {known}")
    return list(dict.fromkeys(names))


def run_bench(
    args: argparse.Namespace, names: list[str], limit: int, repeats: int
) -> dict[str, Any]:
    """Load, run everything interleaved, and assemble the results dict."""
    from transformers.utils import logging as hf_logging

    from ffwd.bench.systems import build_systems
    from ffwd.bench.workloads import select
    from ffwd.config import resolve_fill_config
    from ffwd.models import load_backend, load_tokenizer, resolve_model
    from ffwd.serve.service import ModelService

    hf_logging.set_verbosity_error()  # generate() warns about every greedy config
    load_before = _load_average()
    ref = resolve_model(args.model)
    tokenizer = load_tokenizer(ref)
    backend = load_backend(ref, backend="transformers", dtype=args.dtype, threads=args.threads)
    # FFWD_FILL_* settings (k, max span, ...) apply; each system sets the mode.
    # No prompt cache: every system prefills every prompt from scratch.
    fill = resolve_fill_config()
    service = ModelService(backend, tokenizer, ref.name, fill, prompt_cache_bytes=0)
    workloads = WORKLOADS if args.workload == "all" else (args.workload,)
    bfcl = tuple(args.bfcl or DEFAULT_BFCL)
    items = select(workloads, limit, args.seed, bfcl, args.quick)
    prompts = {it.key: service.prepare_chat(chat_request(it, "off")).prompt_ids for it in items}
    gguf = str(ref.path) if ref.gguf_file else None
    systems, skipped = build_systems(names, service, gguf, torch_threads())
    runs, firsts = _run_all(items, systems, repeats, prompts)
    outputs = {key: {name: {"content": o.content, "calls": [list(c) for c in o.calls]}
                     for name, o in by_system.items()} for key, by_system in firsts.items()}
    summary = report.summarize(runs, [s.name for s in systems])
    sp = report.speedups(summary)
    bound = _bound(tokenizer, service.format_name, bfcl, limit) if "tools" in workloads else {}
    return {
        "environment": {**environment(ref, backend), "load_before": load_before,
                        "load_after": _load_average()},
        "settings": {
            "command": "ffwd bench " + " ".join(_argv()), "workloads": list(workloads),
            "limit": limit, "repeats": repeats, "seed": args.seed, "bfcl": list(bfcl),
            "quick": args.quick, "systems": [s.name for s in systems],
            "fill": {k: v for k, v in asdict(fill).items() if k not in ("fill", "trace")},
            "items": [{"key": it.key, "kind": it.kind, "max_tokens": it.max_tokens,
                       "prompt_tokens": len(prompts[it.key])} for it in items],
        },
        "skipped": skipped,
        "runs": runs,
        "outputs": outputs,
        "summary": summary,
        "speedups": sp,
        "bound": bound,
        "correctness": _correctness(items, outputs, firsts, service, prompts),
        "targets": report.check_targets(summary, sp, bound),
        "default_fill": report.default_fill(sp),
    }


def _run_all(
    items: Sequence[Item], systems: Sequence[System], repeats: int,
    prompts: Mapping[str, list[int]],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Outcome]]]:
    """Warm up, then run `schedule`; return the run rows and the first repeat's outcomes."""
    from tqdm import tqdm

    by_name = {s.name: s for s in systems}
    order = schedule(len(items), list(by_name), repeats)
    runs: list[dict[str, Any]] = []
    firsts: dict[str, dict[str, Outcome]] = {}
    with tqdm(total=len(order) + len(systems), desc="ffwd bench", file=sys.stderr) as bar:
        warm = replace(items[0], max_tokens=4)
        for s in systems:
            bar.set_postfix_str(f"warm-up {s.name}")
            s.run(warm, prompts[warm.key])
            bar.update()
        for repeat, i, name in order:
            item = items[i]
            bar.set_postfix_str(f"{name} {item.id}")
            o = by_name[name].run(item, prompts[item.key])
            runs.append(record(item, name, repeat, o))
            if repeat == 0:
                firsts.setdefault(item.key, {})[name] = o
            bar.update()
    return runs, firsts


# --- correctness and the bound ---------------------------------------------------------


def _correctness(
    items: Sequence[Item], outputs: Mapping[str, Mapping[str, Any]],
    firsts: Mapping[str, Mapping[str, Outcome]], service: Any, prompts: Mapping[str, list[int]],
) -> dict[str, Any]:
    differences = []
    for item in items:
        pair = outputs.get(item.key, {})
        if {"ffwd-off", "hf-generate"} <= set(pair) and pair["ffwd-off"] != pair["hf-generate"]:
            hf_ids = firsts[item.key]["hf-generate"].token_ids or []
            differences.append({
                "item": item.id, "workload": item.workload,
                "explanation": explain_difference(service, item, prompts[item.key], hf_ids),
            })
    # A forced call (tool_choice=required) goes through the strict tier: there
    # ffwd-echo must match ffwd-strict; ffwd-off decodes plainly and may not call.
    free = [it for it in items if it.tool_choice != "required"]
    forced = [it for it in items if it.tool_choice == "required"]
    return {
        "echo_vs_off": identity(free, outputs, "ffwd-echo", "ffwd-off"),
        "echo_vs_strict": identity(forced, outputs, "ffwd-echo", "ffwd-strict"),
        "strict_vs_off": identity(free, outputs, "ffwd-strict", "ffwd-off"),
        "off_vs_hf": identity(items, outputs, "ffwd-off", "hf-generate"),
        "off_vs_hf_differences": differences,
    }


def explain_difference(service: Any, item: Item, prompt_ids: list[int], hf_ids: list[int]) -> str:
    """Where ffwd-off's greedy ids leave hf-generate's, and how close the two logits were.

    Re-decodes plainly with the engine (the service reports text, not ids) and
    scores both choices in one forward over prompt + the shared prefix.
    """
    import torch

    from ffwd.engine.generate import generate

    service.reset()
    off = generate(service.backend, service.tokenizer, prompt_ids,
                   max_tokens=item.max_tokens).token_ids
    i = next((k for k, (a, b) in enumerate(zip(off, hf_ids, strict=False)) if a != b), None)
    if i is None:
        return (f"the same ids over the first {min(len(off), len(hf_ids))}; only where each "
                "stopped differs")
    x = torch.tensor([prompt_ids + hf_ids[:i]], device=service.backend.device)
    with torch.no_grad():
        row = service.backend.model(input_ids=x).logits[0, -1].float()
    gap = float(row[off[i]] - row[hf_ids[i]])
    dec = service.tokenizer.decode
    why = "a near tie, rounded apart by different forward shapes" if abs(gap) < 1e-2 else (
        "not a rounding tie")
    return (f"first differs at output id {i}: ffwd-off {dec([off[i]])!r}, hf-generate "
            f"{dec([hf_ids[i]])!r}; logit gap in one full forward {gap:+.2e} ({why})")


def _bound(tokenizer: Any, fmt: str, bfcl: Sequence[str], limit: int) -> dict[str, float]:
    """The replay fraction (model-free limit of the strict tier) on the same BFCL entries."""
    from ffwd.bench.bfcl import load_entries
    from ffwd.bench.replay import replay
    from ffwd.bench.workloads import TOOL_CHOICES

    entries = [e for c in bfcl for e in load_entries(c, limit)]
    return {choice: round(replay(entries, tokenizer, fmt, choice).fraction, 4)
            for choice in TOOL_CHOICES}


# --- environment ---------------------------------------------------------------------


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def environment(ref: Any, backend: Any) -> dict[str, Any]:
    import torch
    import transformers

    return {
        "cpu": _cpu_name(), "cpu_count": os.cpu_count(), "threads": torch_threads(),
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "llama_cpp": _version("llama-cpp-python"),
        "model": ref.name, "model_path": str(ref.path),
        "dtype": str(next(backend.model.parameters()).dtype).removeprefix("torch."),
        "device": str(backend.device),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _argv() -> list[str]:
    argv = sys.argv[1:]
    return argv[1:] if argv[:1] == ["bench"] else argv
