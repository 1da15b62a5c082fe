"""``ffwd bench``: every system on the same prompts, interleaved, then the results.

`run_bench(args, systems, limit, repeats)` loads the model, starts the
systems' servers (`ffwd.bench.systems`: ffwd over loopback HTTP on the chosen
backend, llama.cpp's own server, transformers' generate), runs every (repeat,
item) with all systems back to back, starting from a different system each
time (`schedule`), so machine noise lands on all alike, each workload of
each repeat a session of its own (what a system carries from one request to
the next, recall's earlier outputs, llama-server's n-gram pools, starts empty
at each workload of each repeat and is never shared between systems), and
returns the
results dict (environment, settings, every run, outputs, summary, speedups,
prefill rows, contention row, correctness, replay bound, targets) that
`ffwd.cli.bench` writes and `ffwd.bench.report` renders.

The ``prefill`` workload runs one system per engine setup
(`names.prefill_systems`); the ``contention`` row (`ffwd.bench.contention`)
runs after the rest, while the other servers sit idle, and the ``concurrency``
row (`ffwd.bench.concurrency`) after them, on servers of its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from ffwd.bench import report
from ffwd.bench.environment import environment, load_average
from ffwd.bench.systems import Outcome, System, parses, servers
from ffwd.bench.systems.ffwd_http import chat_request
from ffwd.bench.systems.names import (
    LLAMA_SERVER,
    SERVED,
    SystemName,
    ffwd_settings,
    parse_system,
    prefill_systems,
)
from ffwd.bench.systems.servers import ChildServer
from ffwd.bench.targets import repeat_targets
from ffwd.bench.workloads import DEFAULT_BFCL, QUICK_WORKLOADS, WORKLOADS, Item


def schedule(per_item: Sequence[Sequence[str]], repeats: int) -> list[tuple[int, int, str]]:
    """``(repeat, item, system)`` in run order: per item its systems (`per_item`) back to
    back, the first one rotating with the item and the repeat."""
    out = []
    for r in range(repeats):
        for i, systems in enumerate(per_item):
            k = (r + i) % len(systems)
            out += [(r, i, name) for name in (*systems[k:], *systems[:k])]
    return out


def record(item: Item, system: str, repeat: int, o: Outcome, prompt_ids: int) -> dict[str, Any]:
    """One run as a JSON-able row (see `report.summarize` and `latency.summarize`)."""
    return {
        "workload": item.workload, "item": item.id, "kind": item.kind, "system": system,
        "repeat": repeat, "prompt_tokens": prompt_ids, "cached": o.cached,
        "tokens": o.tokens, "seconds": round(o.seconds, 4),
        "prefill_seconds": round(o.prefill_seconds, 4),
        "first_token_seconds": round(o.first_token_seconds, 4),
        "forward_calls": o.forward_calls, "injected": o.injected,
        "verify_accepted": o.verify_accepted, "verify_rejected": o.verify_rejected,
        "origins": o.origins, "first_span": o.first_span, "spans": o.spans,
        # items whose next step is a call (every tools item, the agent's call turns)
        "parsed": parses(o, item) if item.single_call else None,
    }


@dataclass(frozen=True)
class Setup:
    """What every part of a bench run shares: the model, its engine and the service."""

    args: argparse.Namespace
    ref: Any
    engine: str
    threads: int
    service: Any
    limit: int  # --limit as resolved (BFCL entries for the replay bound)

    def count(self, text: str) -> int:
        """Ids of `text` in the served tokenizer (no special tokens)."""
        return len(self.service.tokenizer.encode(text, add_special_tokens=False))


def run_bench(
    args: argparse.Namespace, names: list[str], limit: int, repeats: int,
    before: float | None = None,
) -> dict[str, Any]:
    """Load, start the servers, run everything interleaved, assemble the results dict;
    `before` is the contention row's alone figure of an earlier run (``--before``)."""
    from transformers.utils import logging as hf_logging

    from ffwd.bench.workloads import select
    from ffwd.config import resolve_fill_config
    from ffwd.engine.llama.threads import default_threads
    from ffwd.models import engine_for, load_backend, load_tokenizer, resolve_model
    from ffwd.serve.service import ModelService

    hf_logging.set_verbosity_error()  # generate() warns about every greedy config
    load_before = load_average()
    ref = resolve_model(args.model)
    engine = engine_for(ref, args.backend)
    threads = args.threads or default_threads()
    tokenizer = load_tokenizer(ref)
    # A fresh cost curve: the machine as it is now, which the servers started
    # below read from the same cache.
    backend = load_backend(ref, backend=engine, dtype=args.dtype, threads=threads,
                           tokenizer=tokenizer, measure_cost=True)
    # FFWD_FILL_* settings (k, max span, ...) apply; each request sets the mode.
    fill = resolve_fill_config()
    service = ModelService(backend, tokenizer, ref.name, fill, prompt_cache_bytes=0)
    setup = Setup(args, ref, engine, threads, service, limit)
    workloads: tuple[str, ...]
    if args.workload is None:  # --quick's first look, else every workload
        workloads = QUICK_WORKLOADS if args.quick else WORKLOADS
    else:
        workloads = args.workload
    items = select(workloads, limit, args.seed, _bfcl(args), args.quick, count=setup.count,
                   context=service.context_window)
    prompts = {it.key: service.prepare(chat_request(it, "off")).prompt_ids for it in items}
    with ExitStack() as stack:
        systems, skipped = start_systems(names, setup, stack)
        runs, firsts = _run_all(items, systems, repeats, prompts)
        row = (_contention(setup, systems, repeats, skipped, before)
               if "contention" in workloads else None)
    crowd = _concurrency(setup, names, repeats) if "concurrency" in workloads else None
    results = assemble(setup, [s.name for s in systems], items, runs, firsts, prompts, row,
                       crowd)
    results["environment"]["load_before"] = load_before
    results["settings"].update({"workloads": list(workloads), "limit": limit,
                                "repeats": repeats, "systems": [s.name for s in systems],
                                "fill": {k: v for k, v in asdict(fill).items()
                                         if k not in ("mode", "trace")}})
    return {**results, "skipped": skipped}


def assemble(
    setup: Setup, order: Sequence[str], items: Sequence[Item], runs: list[dict[str, Any]],
    firsts: dict[str, dict[str, Outcome]], prompts: Mapping[str, list[int]],
    contention: dict[str, Any] | None, concurrency: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The results dict (see the module docstring) from what the systems `order` returned."""
    from ffwd.bench import concurrency_report, latency
    from ffwd.bench.fidelity import correctness

    outputs = {key: {name: {"content": o.content, "calls": [list(c) for c in o.calls]}
                     for name, o in by_system.items()} for key, by_system in firsts.items()}
    summary = report.summarize([r for r in runs if r["workload"] != latency.WORKLOAD], order)
    prefill = latency.summarize(runs, order)
    sp = report.speedups(summary)
    args, service = setup.args, setup.service
    bfcl = _bfcl(args)
    tools = any(it.workload.startswith("tools") for it in items)
    bound = _bound(service.tokenizer, service.format_name, bfcl, setup.limit) if tools else {}
    return {
        "environment": {**environment(setup.ref, service.backend, setup.engine, setup.threads,
                                      order), "load_after": load_average()},
        "settings": {
            "command": "ffwd bench " + " ".join(_argv()), "seed": args.seed, "bfcl": list(bfcl),
            "quick": args.quick, "backend": setup.engine,
            "items": [{"key": it.key, "kind": it.kind, "max_tokens": it.max_tokens,
                       "prompt_tokens": len(prompts[it.key])} for it in items],
        },
        "runs": runs,
        "outputs": outputs,
        "summary": summary,
        "speedups": sp,
        "prefill": prefill,
        "contention": contention,
        "concurrency": concurrency,
        "bound": bound,
        "correctness": correctness(items, outputs, firsts, service, prompts),
        "targets": report.check_targets(summary, sp, bound, setup.engine, prefill, contention)
        + repeat_targets(runs) + concurrency_report.targets(concurrency),
        "default_fill": report.default_fill(sp),
    }


def start_systems(
    names: Sequence[str], setup: Setup, stack: ExitStack
) -> tuple[list[System], dict[str, str]]:
    """The systems named (in that order), their servers started on `stack`; and why not."""
    from ffwd.bench.systems import Decoder
    from ffwd.bench.systems.ffwd_http import FfwdHTTP
    from ffwd.bench.systems.hf_generate import LOOKUP_TOKENS, HFGenerate
    from ffwd.bench.systems.llama_http import LlamaServerHTTP
    from ffwd.engine.hf import HFBackend

    service = setup.service
    decoder = Decoder(service.tokenizer, service.format_name, frozenset(service.eos_ids))
    started: dict[tuple[str, str | None, bool], ChildServer] = {}
    built: list[System] = []
    skipped: dict[str, str] = {}
    # The transformers systems share the served model's weights when it is one.
    hf_model: Any = service.backend.model if isinstance(service.backend, HFBackend) else None
    for name in names:
        sys_name = parse_system(name)
        why = _cannot_run(sys_name, setup.engine, setup.ref)
        if why:
            skipped[name] = why
        elif sys_name.base in SERVED:
            key = (sys_name.engine or setup.engine, sys_name.kv, sys_name.deterministic)
            if key not in started:
                started[key] = stack.enter_context(ffwd_server(setup, sys_name))
            fill, grammar, recall = ffwd_settings(sys_name.base)
            built.append(FfwdHTTP(started[key].url, fill, name, grammar, recall))
        elif sys_name.base == LLAMA_SERVER:
            start = partial(servers.llama_server, str(setup.ref.path), setup.threads,
                            service.context_window, 512, sys_name.spec, sys_name.flash,
                            upstream=sys_name.upstream)
            peer = LlamaServerHTTP(start, decoder, sys_name.spec, name)
            stack.callback(peer.close)
            built.append(peer)
        else:
            if hf_model is None:
                from ffwd.models import load_model

                hf_model = load_model(setup.ref, dtype=setup.args.dtype, device="cpu")
            lookup = LOOKUP_TOKENS if sys_name.base == "hf-prompt-lookup" else 0
            built.append(HFGenerate(hf_model, decoder, lookup))
    return built, skipped


def ffwd_server(setup: Setup, name: SystemName) -> ChildServer:
    """A new ``ffwd serve`` process for the ffwd system `name`."""
    return servers.ffwd_server(setup.args.model, name.engine or setup.engine, setup.threads,
                               setup.args.dtype, name.kv, name.deterministic)


def _cannot_run(name: SystemName, engine: str, ref: Any) -> str | None:
    """Why the system `name` cannot run on this model, or None."""
    if name.upstream:
        from ffwd.bench.systems.llama_server import NO_UPSTREAM, native_binary

        if native_binary(upstream=True) is None:
            return NO_UPSTREAM
    if ref.gguf_file:
        return None
    if name.base in SERVED and (name.engine or engine) == "llamacpp":
        return "llama.cpp runs GGUF files; this model is a HF directory"
    if name.base == LLAMA_SERVER:
        return "llama-server runs GGUF files; this model is a HF directory"
    return None


def _run_all(
    items: Sequence[Item], systems: Sequence[System], repeats: int,
    prompts: Mapping[str, list[int]],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Outcome]]]:
    """Warm up, then run `schedule`, each workload of each repeat a session of its own
    (`System.begin`); return the run rows and the first repeat's outcomes. The prefill
    rows run one system per engine setup (`prefill_systems`)."""
    from tqdm import tqdm

    by_name = {s.name: s for s in systems}
    every = list(by_name)
    order = schedule([prefill_systems(every) if it.workload == "prefill" else every
                      for it in items], repeats)
    runs: list[dict[str, Any]] = []
    firsts: dict[str, dict[str, Outcome]] = {}
    warm_ups = systems if items else ()
    with tqdm(total=len(order) + len(warm_ups), desc="ffwd bench", file=sys.stderr) as bar:
        for s in warm_ups:
            bar.set_postfix_str(f"warm-up {s.name}")
            s.begin("warm-up")
            warm = replace(items[0], max_tokens=4, warm=False)
            s.run(warm, prompts[warm.key])
            bar.update()
        session: tuple[int, str] | None = None
        for repeat, i, name in order:
            item = items[i]
            # each workload of each repeat starts with nothing carried over: no system
            # drafts from another workload's replies (tools/auto after tools/required)
            if (repeat, item.workload) != session:
                session = (repeat, item.workload)
                for s in systems:
                    s.begin(f"repeat-{repeat}-{item.workload}")
            bar.set_postfix_str(f"{name} {item.id}")
            o = by_name[name].run(item, prompts[item.key])
            runs.append(record(item, name, repeat, o, len(prompts[item.key])))
            if repeat == 0:
                firsts.setdefault(item.key, {})[name] = o
            bar.update()
    return runs, firsts


def _contention(
    setup: Setup, systems: Sequence[System], repeats: int, skipped: dict[str, str],
    before: float | None,
) -> dict[str, Any] | None:
    """The contention row of ``ffwd-off`` (else the first ffwd system that runs;
    `ffwd.bench.contention`) beside a twin of its server; None (and why, in `skipped`)
    where none runs."""
    from ffwd.bench import contention
    from ffwd.bench.workloads import contention_item

    served = [s for s in systems if parse_system(s.name).base in SERVED]
    if not served:
        skipped["contention"] = "no ffwd system runs"
        return None
    system = next((s for s in served if s.name == "ffwd-off"), served[0])
    item = contention_item(setup.args.seed, setup.args.quick)
    twin = partial(ffwd_server, setup, parse_system(system.name))
    return {**contention.measure(system, item, twin, repeats), "before": before}


def _concurrency(setup: Setup, names: Sequence[str], repeats: int) -> dict[str, Any]:
    """The concurrency row (`ffwd.bench.concurrency`) at each ``--parallel`` asked for."""
    from ffwd.bench import concurrency
    from ffwd.config import DEFAULT_PARALLEL

    parallels = concurrency.parallels_default(getattr(setup.args, "parallel", None),
                                              DEFAULT_PARALLEL)
    return concurrency.measure(setup, names, parallels, repeats)


# --- the bound ---------------------------------------------------------------------


def _bound(tokenizer: Any, fmt: str, bfcl: Sequence[str], limit: int) -> dict[str, float]:
    """The replay fraction (model-free limit of the strict tier) on the same BFCL entries."""
    from ffwd.bench.replay import replay
    from ffwd.bench.workloads import TOOL_CHOICES
    from ffwd.bench.workloads.bfcl import load_entries

    entries = [e for c in bfcl for e in load_entries(c, limit)]
    return {choice: round(replay(entries, tokenizer, fmt, choice).fraction, 4)
            for choice in TOOL_CHOICES}


def _bfcl(args: argparse.Namespace) -> tuple[str, ...]:
    """The BFCL categories asked for; --quick takes the first default one."""
    return tuple(args.bfcl or (DEFAULT_BFCL[:1] if args.quick else DEFAULT_BFCL))





def _argv() -> list[str]:
    argv = sys.argv[1:]
    return argv[1:] if argv[:1] == ["bench"] else argv
