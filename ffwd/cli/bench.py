"""``ffwd bench``: every system on the same prompts, interleaved, then a report.

    ffwd bench [--workload tools|echo|prose|agent|prefill|contention|concurrency|all]
               [--limit N] [--parallel N[,N...]]
               [--systems LIST] [--model default|PATH] [--backend auto|llamacpp|transformers]
               [--repeats R] [--threads T] [--out DIR] [--json] [--quick] [--before DIR]

The ffwd systems are requests to ``ffwd serve`` processes, ``llama-server``
(and ``llama-server:ngram-mod`` and the other draft-free speculation modes)
to llama.cpp's own server (the native build of ``make peers``, else the
xllamacpp fallback), both over loopback HTTP (`ffwd.bench.systems`); all use
the same thread count and the prompt ids this process renders with the
service (`ffwd.bench.run`). Writes ``DIR/results.json``, ``DIR/report.md``
and (where decode workloads ran) ``DIR/speedup.png``; ``--json`` also prints
the results to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ffwd.bench import report
from ffwd.bench.contention import alone_in
from ffwd.bench.run import run_bench
from ffwd.bench.systems.names import ALL_SYSTEMS, QUICK_SYSTEMS, known_systems, parse_system
from ffwd.bench.workloads import DEFAULT_BFCL, QUICK_WORKLOADS, WORKLOADS

DEFAULT_LIMIT, QUICK_LIMIT = 4, 1
DEFAULT_REPEATS, QUICK_REPEATS = 3, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", type=workload_list, default=None,
                        help="comma-separated workloads from " + ", ".join(WORKLOADS)
                             + ", or all (default all; --quick: "
                             + ", ".join(QUICK_WORKLOADS) + ")")
    parser.add_argument("--limit", type=int, default=None,
                        help=f"entries per BFCL category, edits and re-quotes, prose questions, "
                             f"agent conversations "
                             f"(default {DEFAULT_LIMIT}; --quick {QUICK_LIMIT})")
    parser.add_argument("--systems", default=None,
                        help=f"comma-separated (default {', '.join(ALL_SYSTEMS)}; --quick "
                             f"{', '.join(QUICK_SYSTEMS)}), from: " + known_systems()
                        + " (an ffwd system may name its engine, ffwd-off:transformers, "
                        "llama.cpp's KV cache type, ffwd-off:kv-f16, or the exact mode, "
                        "ffwd-echo:deterministic (ffwd serve --deterministic); "
                        "llama-server:MODE is llama-server with that draft-free speculation "
                        "mode)")
    parser.add_argument("--model", default="default", help="default, a HF directory or a .gguf")
    parser.add_argument("--backend", default="auto",
                        help="engine of the ffwd systems: auto|llamacpp|transformers")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"runs of every item and system (default {DEFAULT_REPEATS}; "
                             f"--quick {QUICK_REPEATS})")
    parser.add_argument("--out", default="ffwd-bench", help="output directory")
    parser.add_argument("--bfcl", action="append", default=None, metavar="CATEGORY",
                        help=f"BFCL category for tools (repeatable; default "
                             f"{' + '.join(DEFAULT_BFCL)})")
    parser.add_argument("--seed", type=int, default=0, help="echo, prose and agent selection")
    parser.add_argument("--dtype", default="float32",
                        help="transformers: float32 (default: greedy identity is exact), "
                             "bfloat16 or auto")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads of every system (0: torch's default)")
    parser.add_argument("--quick", action="store_true",
                        help="a first look in a few minutes: one item of each decode workload "
                             "with short outputs, once, on the --quick systems")
    parser.add_argument("--parallel", default=None, metavar="N[,N...]",
                        help="the concurrency row: ffwd serve --parallel N beside llama-server "
                             "-np N, for each N (default: ffwd's default)")
    parser.add_argument("--json", action="store_true", help="print results.json to stdout")
    parser.add_argument("--before", default=None, metavar="DIR",
                        help="an earlier ffwd bench --out DIR with a contention row: its "
                             "decode speed alone is what this run's alone must keep up with")


def workload_list(text: str) -> tuple[str, ...]:
    """``--workload``'s value: workloads in the order they run, ``all`` for every one.

    >>> workload_list("prose,tools"), workload_list("all")[:2]
    (('tools', 'prose'), ('tools', 'echo'))
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in (*WORKLOADS, "all")]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload {', '.join(unknown) or repr(text)}: choose from "
            + ", ".join((*WORKLOADS, "all")))
    return WORKLOADS if "all" in names else tuple(w for w in WORKLOADS if w in names)


def main(args: argparse.Namespace) -> int:
    try:
        names = _system_names(args.systems or ",".join(QUICK_SYSTEMS if args.quick
                                                       else ALL_SYSTEMS))
        limit = args.limit or (QUICK_LIMIT if args.quick else DEFAULT_LIMIT)
        repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
        if limit < 1 or repeats < 1:
            raise ValueError("--limit and --repeats must be at least 1")
        before = alone_in(Path(args.before)) if args.before else None
    except (ValueError, OSError) as exc:
        print(f"ffwd bench: {exc}", file=sys.stderr)
        return 2
    results = run_bench(args, names, limit, repeats, before)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    (out / "report.md").write_text(report.render_markdown(results))
    written = [out / "results.json", out / "report.md"]
    if results["summary"]:  # decode workloads ran (not only prefill or contention)
        report.plot(results["summary"], results["speedups"], out / "speedup.png")
        written.append(out / "speedup.png")
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
    else:
        print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0


def _system_names(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--systems {raw!r}: expected some of {known_systems()}")
    for name in names:
        try:
            parse_system(name)
        except ValueError as exc:
            raise ValueError(f"--systems: {exc}; expected some of {known_systems()}") from None
    return list(dict.fromkeys(names))
