"""``ffwd bench``: every system on the same prompts, interleaved, then the results.

`run_bench(args, systems, limit, repeats)` loads the model, starts the
systems' servers (`ffwd.bench.systems`: ffwd over loopback HTTP on the chosen
backend, llama.cpp's own server, transformers' generate), runs every (repeat,
item) with all systems back to back, starting from a different system each
time (`schedule`), so machine noise lands on all alike, each repeat a
session of its own (what a system carries from one request to the next,
recall's earlier outputs, llama-server's n-gram pools, starts empty at each
repeat and is never shared between systems), and returns the
results dict (environment, settings, every run, outputs, summary, speedups,
correctness, replay bound, targets) that `ffwd.cli.bench` writes and
`ffwd.bench.report` renders.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, replace
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from ffwd.bench import report
from ffwd.bench.systems import Outcome, System, parses
from ffwd.bench.systems.ffwd_http import chat_request
from ffwd.bench.systems.names import LLAMA_SERVER, SERVED, SystemName, ffwd_settings, parse_system
from ffwd.bench.workloads import DEFAULT_BFCL, WORKLOADS, Item


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
        "first_token_seconds": round(o.first_token_seconds, 4),
        "forward_calls": o.forward_calls, "injected": o.injected,
        "verify_accepted": o.verify_accepted, "verify_rejected": o.verify_rejected,
        "origins": o.origins,
        # items whose next step is a call (every tools item, the agent's call turns)
        "parsed": parses(o, item) if item.single_call else None,
    }


def run_bench(
    args: argparse.Namespace, names: list[str], limit: int, repeats: int
) -> dict[str, Any]:
    """Load, start the servers, run everything interleaved, assemble the results dict."""
    from transformers.utils import logging as hf_logging

    from ffwd.bench.fidelity import correctness
    from ffwd.bench.workloads import select
    from ffwd.config import resolve_fill_config
    from ffwd.models import engine_for, load_backend, load_tokenizer, resolve_model
    from ffwd.serve.service import ModelService

    hf_logging.set_verbosity_error()  # generate() warns about every greedy config
    load_before = _load_average()
    ref = resolve_model(args.model)
    engine = engine_for(ref, args.backend)
    threads = args.threads or torch_threads()
    tokenizer = load_tokenizer(ref)
    # A fresh cost curve: the machine as it is now, which the servers started
    # below read from the same cache.
    backend = load_backend(ref, backend=engine, dtype=args.dtype, threads=threads,
                           tokenizer=tokenizer, measure_cost=True)
    # FFWD_FILL_* settings (k, max span, ...) apply; each request sets the mode.
    fill = resolve_fill_config()
    service = ModelService(backend, tokenizer, ref.name, fill, prompt_cache_bytes=0)
    workloads = WORKLOADS if args.workload == "all" else (args.workload,)
    bfcl = tuple(args.bfcl or DEFAULT_BFCL)
    items = select(workloads, limit, args.seed, bfcl, args.quick)
    prompts = {it.key: service.prepare(chat_request(it, "off")).prompt_ids for it in items}
    with ExitStack() as stack:
        systems, skipped = start_systems(names, args, ref, engine, service, threads, stack)
        runs, firsts = _run_all(items, systems, repeats, prompts)
    outputs = {key: {name: {"content": o.content, "calls": [list(c) for c in o.calls]}
                     for name, o in by_system.items()} for key, by_system in firsts.items()}
    summary = report.summarize(runs, [s.name for s in systems])
    sp = report.speedups(summary)
    bound = _bound(tokenizer, service.format_name, bfcl, limit) if "tools" in workloads else {}
    peer = any(parse_system(s.name).base == LLAMA_SERVER for s in systems)
    env = environment(ref, backend, engine, threads, peer)
    return {
        "environment": {**env, "load_before": load_before, "load_after": _load_average()},
        "settings": {
            "command": "ffwd bench " + " ".join(_argv()), "workloads": list(workloads),
            "limit": limit, "repeats": repeats, "seed": args.seed, "bfcl": list(bfcl),
            "quick": args.quick, "systems": [s.name for s in systems], "backend": engine,
            "fill": {k: v for k, v in asdict(fill).items() if k not in ("mode", "trace")},
            "items": [{"key": it.key, "kind": it.kind, "max_tokens": it.max_tokens,
                       "prompt_tokens": len(prompts[it.key])} for it in items],
        },
        "skipped": skipped,
        "runs": runs,
        "outputs": outputs,
        "summary": summary,
        "speedups": sp,
        "bound": bound,
        "correctness": correctness(items, outputs, firsts, service, prompts),
        "targets": report.check_targets(summary, sp, bound, engine),
        "default_fill": report.default_fill(sp),
    }


def start_systems(
    names: Sequence[str], args: argparse.Namespace, ref: Any, engine: str, service: Any,
    threads: int, stack: ExitStack,
) -> tuple[list[System], dict[str, str]]:
    """The systems named (in that order), their servers started on `stack`; and why not."""
    from ffwd.bench.systems import Decoder, servers
    from ffwd.bench.systems.ffwd_http import FfwdHTTP
    from ffwd.bench.systems.hf_generate import LOOKUP_TOKENS, HFGenerate
    from ffwd.bench.systems.llama_http import LlamaServerHTTP
    from ffwd.engine.hf import HFBackend

    decoder = Decoder(service.tokenizer, service.format_name, frozenset(service.eos_ids))
    started: dict[tuple[str, str | None], servers.ChildServer] = {}
    built: list[System] = []
    skipped: dict[str, str] = {}
    # The transformers systems share the served model's weights when it is one.
    hf_model: Any = service.backend.model if isinstance(service.backend, HFBackend) else None
    for name in names:
        sys_name = parse_system(name)
        why = _cannot_run(sys_name, engine, ref)
        if why:
            skipped[name] = why
        elif sys_name.base in SERVED:
            kind, kv = sys_name.engine or engine, sys_name.kv
            if (kind, kv) not in started:
                started[kind, kv] = stack.enter_context(
                    servers.ffwd_server(args.model, kind, threads, args.dtype, kv))
            fill, grammar, recall = ffwd_settings(sys_name.base)
            built.append(FfwdHTTP(started[kind, kv].url, fill, name, grammar, recall))
        elif sys_name.base == LLAMA_SERVER:
            start = partial(servers.llama_server, str(ref.path), threads,
                            service.backend.context_window, 512, sys_name.spec)
            peer = LlamaServerHTTP(start, decoder, sys_name.spec)
            stack.callback(peer.close)
            built.append(peer)
        else:
            if hf_model is None:
                from ffwd.models import load_model

                hf_model = load_model(ref, dtype=args.dtype, device="cpu")
            lookup = LOOKUP_TOKENS if sys_name.base == "hf-prompt-lookup" else 0
            built.append(HFGenerate(hf_model, decoder, lookup))
    return built, skipped


def _cannot_run(name: SystemName, engine: str, ref: Any) -> str | None:
    """Why the system `name` cannot run on this model, or None."""
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
    """Warm up, then run `schedule`, each repeat a session of its own (`System.begin`);
    return the run rows and the first repeat's outcomes."""
    from tqdm import tqdm

    by_name = {s.name: s for s in systems}
    order = schedule(len(items), list(by_name), repeats)
    runs: list[dict[str, Any]] = []
    firsts: dict[str, dict[str, Outcome]] = {}
    with tqdm(total=len(order) + len(systems), desc="ffwd bench", file=sys.stderr) as bar:
        warm = replace(items[0], max_tokens=4)
        for s in systems:
            bar.set_postfix_str(f"warm-up {s.name}")
            s.begin("warm-up")
            s.run(warm, prompts[warm.key])
            bar.update()
        session = None
        for repeat, i, name in order:
            if repeat != session:  # each repeat starts with nothing carried over
                session = repeat
                for s in systems:
                    s.begin(f"repeat-{repeat}")
            item = items[i]
            bar.set_postfix_str(f"{name} {item.id}")
            o = by_name[name].run(item, prompts[item.key])
            runs.append(record(item, name, repeat, o))
            if repeat == 0:
                firsts.setdefault(item.key, {})[name] = o
            bar.update()
    return runs, firsts


# --- the bound ---------------------------------------------------------------------


def _bound(tokenizer: Any, fmt: str, bfcl: Sequence[str], limit: int) -> dict[str, float]:
    """The replay fraction (model-free limit of the strict tier) on the same BFCL entries."""
    from ffwd.bench.replay import replay
    from ffwd.bench.workloads import TOOL_CHOICES
    from ffwd.bench.workloads.bfcl import load_entries

    entries = [e for c in bfcl for e in load_entries(c, limit)]
    return {choice: round(replay(entries, tokenizer, fmt, choice).fraction, 4)
            for choice in TOOL_CHOICES}


# --- environment ---------------------------------------------------------------------


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def environment(
    ref: Any, backend: Any, engine: str, threads: int, llama_server: bool
) -> dict[str, Any]:
    import torch
    import transformers

    from ffwd.engine.native import system_info

    dtype = backend.dtype_name  # llama.cpp: gguf-kv-<the KV cache's type>
    env = {
        "cpu": _cpu_name(), "cpu_count": os.cpu_count(), "threads": threads,
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "llama_cpp": _version("llama-cpp-python"),
        "llama_cpp_system_info": system_info(), "backend": engine,
        "model": ref.name, "model_path": str(ref.path), "dtype": dtype,
        "device": str(backend.device),
    }
    if llama_server:
        from ffwd.bench.systems.llama_server import system_info as server_info

        env["xllamacpp"] = _version("xllamacpp")
        env["llama_server_system_info"] = server_info()
    return env


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
