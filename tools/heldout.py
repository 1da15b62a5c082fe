"""Issue 40's held-out check: copy and repeat prompts nobody tuned for, served.

    python -m tools.heldout [--systems S,S,...] [--repeats 2] [--max-tokens 400]

Each copy prompt of `tools.heldout_prompts` goes twice and each repeat prompt three
times, in order, to every system of `ffwd bench` named (default ``ffwd-echo`` beside
``llama-server:ngram-mod`` at both attention flags), with the same prompt ids, the
systems interleaved send by send, each repeat a fresh session (`ffwd.bench.run`'s
schedule and servers). It prints, per target send (a copy prompt's second, a repeat's
third) and system: ids out, decode ids/s (median over repeats) and the share of ids
injected (ffwd) or drafted and accepted (llama-server).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from contextlib import ExitStack

from ffwd.bench.workloads import Item

DEFAULT_SYSTEMS = "ffwd-echo,llama-server:ngram-mod,llama-server:fa-off+ngram-mod"


def heldout_items(max_tokens: int) -> tuple[list[Item], set[str]]:
    """Every send in order, and the keys of the target sends."""
    from tools.heldout_prompts import COPY, REPEAT

    items, targets = [], set()
    for cases, sends in ((COPY, 2), (REPEAT, 3)):
        for name, text in cases:
            for n in range(1, sends + 1):
                it = Item("heldout", f"{name}.{n}", [{"role": "user", "content": text}],
                          max_tokens, kind=f"{name}.{n}")
                items.append(it)
                if n == sends:
                    targets.add(it.key)
    return items, targets


def main(argv: Sequence[str] | None = None) -> int:
    from ffwd.bench.environment import load_average
    from ffwd.bench.run import Setup, _run_all, start_systems
    from ffwd.bench.systems.ffwd_http import chat_request
    from ffwd.config import resolve_fill_config
    from ffwd.engine.llama.threads import default_threads
    from ffwd.models import load_backend, load_tokenizer, resolve_model
    from ffwd.serve.service import ModelService

    p = argparse.ArgumentParser(prog="python -m tools.heldout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default=DEFAULT_SYSTEMS)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=400)
    args = p.parse_args(argv)
    args.model, args.dtype, args.quick, args.seed = "default", "auto", False, 0
    ref = resolve_model("default")
    threads = default_threads()
    tokenizer = load_tokenizer(ref)
    backend = load_backend(ref, backend="llamacpp", threads=threads, tokenizer=tokenizer)
    service = ModelService(backend, tokenizer, ref.name, resolve_fill_config(),
                           prompt_cache_bytes=0)
    setup = Setup(args, ref, "llamacpp", threads, service, 1)
    items, targets = heldout_items(args.max_tokens)
    prompts = {it.key: service.prepare(chat_request(it, "off")).prompt_ids for it in items}
    print(f"load average before: {load_average()}", flush=True)
    with ExitStack() as stack:
        systems, skipped = start_systems(args.systems.split(","), setup, stack)
        runs, _ = _run_all(items, systems, args.repeats, prompts)
    print(f"load average after: {load_average()}; skipped: {skipped or 'none'}")
    print("| send | system | ids | decode ids/s (each repeat) | injected or accepted |")
    print("|---|---|---:|---:|---:|")
    for it in items:
        if it.key not in targets:
            continue
        for s in systems:
            rows = [r for r in runs if r["item"] == it.id and r["system"] == s.name]
            speeds = [r["tokens"] / max(r["seconds"] - r["prefill_seconds"], 1e-9) for r in rows]
            share = [max(r["injected"], r["verify_accepted"]) / max(r["tokens"], 1)
                     for r in rows]
            print(f"| {it.id} | {s.name} | {'/'.join(str(r['tokens']) for r in rows)} | "
                  f"{statistics.median(speeds):.1f} ({', '.join(f'{v:.1f}' for v in speeds)}) "
                  f"| {statistics.median(share):.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
