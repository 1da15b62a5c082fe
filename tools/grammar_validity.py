"""How often a forced tool choice returns a valid call, on BFCL, per format.

    python -m tools.grammar_validity [--bfcl simple_python multiple] [--limit N]
        [--format hermes ...] [--grammar on off] [--tool-choice required named]
        [--max-tokens 128] [--backend auto|llamacpp|transformers] [--json]

Each BFCL entry is sent through `ModelService` (the served path) with
``tool_choice="required"`` (or ``named``: the ground truth's function by
name), greedy, once per format (the format's builtin template), per grammar
setting and per tool choice. A reply counts as valid when it carries at
least one call and every call names a listed function whose arguments parse
and validate against that function's schema (`jsonschema`). Replies cut off
by ``max_tokens`` are counted apart. Reports the valid share, and the
decode tokens per second (after prefill) so that both settings can be compared.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import jsonschema

from ffwd.bench.workloads.bfcl import CATEGORIES, load_entries
from ffwd.config import FillConfig
from ffwd.engine.core.generate import drive
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.service import ModelService
from ffwd.templates.formats import FORMATS
from ffwd.templates.tools import normalize_tools


def valid(calls: Sequence[Any], tools: Sequence[dict[str, Any]]) -> bool:
    """At least one call, each of a listed function with schema-valid arguments."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if not calls:
        return False
    for call in calls:
        if call.name not in schemas:
            return False
        try:
            jsonschema.validate(json.loads(call.arguments), schemas[call.name])
        except (json.JSONDecodeError, jsonschema.ValidationError):
            return False
    return True


def measure(
    service: ModelService, entries: Sequence[Any], grammar: bool, max_tokens: int,
    choice: str = "required",
) -> dict[str, Any]:
    counts = {"requests": 0, "valid": 0, "cut": 0, "tokens": 0, "injected": 0}
    decode_s = 0.0
    for entry in entries:
        tools = normalize_tools(entry.tools)
        named = {"type": "function", "function": {"name": entry.call.name}}
        req = parse_chat({
            "messages": entry.messages, "tools": tools,
            "tool_choice": named if choice == "named" else "required",
            "max_tokens": max_tokens, "temperature": 0.0, "ffwd": {"grammar": grammar},
        })
        seq = service.context.sequences[0]
        seq.reset()
        events = list(drive(seq, service.steps(service.prepare(req), seq, lambda: False)))
        done = events[-1].result
        assert done is not None
        counts["requests"] += 1
        counts["valid"] += valid(done.calls, tools)
        counts["cut"] += done.completion_tokens >= max_tokens
        counts["tokens"] += done.completion_tokens
        counts["injected"] += done.stats.injected
        decode_s += done.seconds - done.prefill_seconds
    n = max(1, counts["requests"])
    return {**counts, "valid_share": round(counts["valid"] / n, 4),
            "decode_tok_s": round(counts["tokens"] / decode_s, 2) if decode_s else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    from ffwd.models import load_backend, load_tokenizer

    p = argparse.ArgumentParser(prog="python -m tools.grammar_validity",
                                description=__doc__.splitlines()[0])
    p.add_argument("--bfcl", nargs="+", choices=CATEGORIES, default=["simple_python", "multiple"])
    p.add_argument("--format", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    p.add_argument("--grammar", nargs="+", choices=("on", "off"), default=["on", "off"])
    p.add_argument("--tool-choice", nargs="+", choices=("required", "named"),
                   default=["required"])
    p.add_argument("--limit", type=int, default=10, help="first N entries per category")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--fill", default="strict", choices=("off", "strict", "echo"))
    p.add_argument("--model", default="default")
    p.add_argument("--backend", default="auto", choices=("auto", "llamacpp", "transformers"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    tokenizer = load_tokenizer(args.model)
    backend = load_backend(args.model, backend=args.backend, dtype=args.dtype, tokenizer=tokenizer)
    entries = [e for c in args.bfcl for e in load_entries(c, args.limit)]
    for fmt in args.format:
        service = ModelService(backend, tokenizer, args.model, FillConfig(mode=args.fill),
                               tool_format=fmt, prompt_cache_bytes=0)
        for setting in args.grammar:
            for choice in args.tool_choice:
                t0 = time.perf_counter()
                out = {"format": fmt, "grammar": setting, "tool_choice": choice,
                       "bfcl": args.bfcl, "limit": args.limit,
                       **measure(service, entries, setting == "on", args.max_tokens, choice),
                       "seconds": round(time.perf_counter() - t0, 1)}
                print(json.dumps(out) if args.json else
                      "  ".join(f"{k}={v}" for k, v in out.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
