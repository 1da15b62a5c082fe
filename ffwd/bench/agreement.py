"""How often a batched forward and one-id forwards pick the same greedy id.

    python -m ffwd.bench.agreement [--model default|gemma3|PATH] [--backend auto|...]
        [--threads 1,2] [--kv-cache auto,f16] [--flash-attn on,off] [--span 16]
        [--tokens 320] [--prompts 3]

Fill appends several ids per forward where plain decoding appends one, so
greedy fill equals greedy off exactly where the engine gives the same logits
both ways. For each prompt this decodes `tokens` ids greedily one at a time
(end ids masked, so every prompt runs the full length), then replays the
same ids in forwards of `span` and compares, position by position, the argmax
and the logits of the two. Positions are reported by how many ids the cache
held, below and from `SPLIT` (with an f16 KV cache llama.cpp's one-id decode
changes its attention kernel as the cache grows). The prompt cache changes how
a prompt is prefilled: ``prefill`` compares the last row of a cold prefill of
the whole sequence with warm ones that reuse all but the last 1, 2, 16, 64 or
513 ids, and with the one-id decode's row at that position.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import torch

SPLIT = 256
PROMPTS = (
    "Tell a long story about a lighthouse keeper who finds a message in a bottle.",
    "Explain, step by step and in detail, how a compiler turns source code into a program.",
    "Describe a week-long hiking trip through the Alps, day by day.",
    "Write a detailed history of the bicycle, from its invention to today.",
)


def greedy_one_by_one(backend: Any, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """`n` greedy ids (end ids masked) and the logits row that chose each."""
    backend.reset()
    backend.prefill(prompt)
    eos = sorted(backend.eos_ids)
    ids, rows, row = [], [], backend.last_logits
    for _ in range(n):
        rows.append(row)
        masked = row.clone()
        masked[eos] = -torch.inf
        ids.append(int(masked.argmax()))
        row = backend.append(ids[-1:])
    return ids, torch.stack(rows)


def batched(backend: Any, prompt: list[int], ids: list[int], span: int) -> torch.Tensor:
    """The logits row before each of `ids`, from forwards of `span` ids."""
    backend.reset()
    backend.prefill(prompt)
    rows = [backend.last_logits]
    for start in range(0, len(ids) - 1, span):
        rows.extend(backend.forward(ids[start : min(start + span, len(ids) - 1)]))
    return torch.stack(rows)


def compare(single: torch.Tensor, multi: torch.Tensor, cached: Sequence[int]) -> dict[str, Any]:
    """Flips and max |logit difference|, split by cache length at `SPLIT`.

    >>> s = torch.tensor([[0.0, 1.0], [1.0, 0.0]]); m = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    >>> compare(s, m, [10, 300])["below"]
    {'positions': 1, 'flips': 0, 'max_abs_diff': 0.0}
    """
    flips = (single.argmax(-1) != multi.argmax(-1)).tolist()
    diff = (single - multi).abs().amax(-1).tolist()
    out = {}
    for name, keep in (("below", lambda c: c < SPLIT), ("from", lambda c: c >= SPLIT)):
        at = [i for i, c in enumerate(cached) if keep(c)]
        out[name] = {"positions": len(at), "flips": sum(flips[i] for i in at),
                     "max_abs_diff": round(max((diff[i] for i in at), default=0.0), 4)}
    return out


WARM = (1, 2, 16, 64, 513)  # ids a warm prefill forwards after what it reuses


def prefill_rows(backend: Any, seq: list[int]) -> dict[str, torch.Tensor]:
    """The last row of `seq` prefilled cold, and warm from each reuse point in `WARM`."""
    backend.reset()
    backend.prefill(seq)
    rows = {"cold": backend.last_logits.clone()}
    for rest in (r for r in WARM if r < len(seq)):
        backend.reset()
        backend.prefill(seq[: len(seq) - rest])
        backend.prefill(seq)  # reuses all but `rest` ids, as the prompt cache does
        rows[f"warm-{rest}"] = backend.last_logits.clone()
    return rows


def measure(backend: Any, prompts: Sequence[list[int]], tokens: int, span: int) -> dict[str, Any]:
    """`compare` summed over `prompts`, and the prefill comparison."""
    total: dict[str, Any] = {k: {"positions": 0, "flips": 0, "max_abs_diff": 0.0}
                             for k in ("below", "from", "prefill")}
    for prompt in prompts:
        ids, single = greedy_one_by_one(backend, prompt, tokens)
        multi = batched(backend, prompt, ids, span)
        part = compare(single, multi, [len(prompt) + i for i in range(tokens)])
        rows = prefill_rows(backend, [*prompt, *ids[:-1]])
        cold = rows.pop("cold")
        others = [single[-1], *rows.values()]  # one-id decode's row there, and each warm one
        part["prefill"] = {
            "positions": len(others),
            "flips": sum(int(r.argmax() != cold.argmax()) for r in others),
            "max_abs_diff": round(max(float((r - cold).abs().max()) for r in others), 4)}
        for k, v in part.items():
            t = total[k]
            t["positions"] += v["positions"]
            t["flips"] += v["flips"]
            t["max_abs_diff"] = max(t["max_abs_diff"], v["max_abs_diff"])
    return total


def _backend(ref: Any, engine: str, dtype: str, threads: int, kv_cache: str,
             flash: str) -> Any:
    """A bare backend (no cost surface: nothing here sizes spans by it)."""
    if engine == "llamacpp":
        from ffwd.engine.llama.context import open_llama

        return open_llama(ref.path, threads=threads, kv_cache=kv_cache, flash_attn=flash)
    from ffwd.engine.hf import HFBackend
    from ffwd.models import load_model

    torch.set_num_threads(threads)
    return HFBackend(load_model(ref, dtype=dtype, device="cpu"))


def main(argv: Sequence[str] | None = None) -> int:
    from ffwd.models import engine_for, load_tokenizer, resolve_model
    from ffwd.templates.choose import encode_prompt

    p = argparse.ArgumentParser(prog="python -m ffwd.bench.agreement", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--backend", default="auto")
    p.add_argument("--dtype", default="float32", help="transformers only")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--kv-cache", default="auto",
                   help="llama.cpp: comma-separated KV types (auto: f16)")
    p.add_argument("--flash-attn", default="on",
                   help="llama.cpp: comma-separated flash attention settings, on and/or off")
    p.add_argument("--span", type=int, default=16, help="ids per batched forward")
    p.add_argument("--tokens", type=int, default=320, help="greedy ids per prompt")
    p.add_argument("--prompts", type=int, default=3, help=f"how many (at most {len(PROMPTS)})")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    ref = resolve_model(args.model)
    tok = load_tokenizer(ref)
    prompts = [encode_prompt(tok, q) for q in PROMPTS[: args.prompts]]  # as served
    engine = engine_for(ref, args.backend)
    report: dict[str, Any] = {"model": ref.name, "backend": engine, "span": args.span, "runs": []}
    kinds = args.kv_cache.split(",") if engine == "llamacpp" else ["-"]
    flashes = args.flash_attn.split(",") if engine == "llamacpp" else ["-"]
    for threads, kv, fa in ((int(t), k, f) for t in args.threads.split(",") for k in kinds
                            for f in flashes):
        try:
            backend = _backend(ref, engine, args.dtype, threads, kv, fa)
        except ValueError as e:  # a combination llama.cpp cannot run (q8_0 without flash)
            print(f"{ref.name} threads={threads} kv={kv} flash={fa}: skipped, {e}",
                  file=sys.stderr)
            continue
        result = measure(backend, prompts, args.tokens, args.span)
        report["runs"].append({"threads": threads, "kv_cache": kv, "flash_attn": fa, **result})
        if not args.json:
            for k, v in result.items():
                rate = 1 - v["flips"] / v["positions"] if v["positions"] else float("nan")
                per_k = 1000 * v["flips"] / v["positions"] if v["positions"] else float("nan")
                where = "prefill cold vs warm/one-id" if k == "prefill" else f"cache {k} {SPLIT}"
                print(f"{ref.name} {engine} threads={threads} kv={kv} flash={fa} {where}: "
                      f"{v['positions'] - v['flips']}/{v['positions']} argmax agree "
                      f"({rate:.2%}; {per_k:.1f} flips per 1000 ids), "
                      f"max |logit diff| {v['max_abs_diff']}")
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
