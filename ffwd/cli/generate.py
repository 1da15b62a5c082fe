"""`ffwd generate`: one generation from a prompt, printed as text or JSON.

The prompt goes through the chat template as a user turn unless ``--raw``:
the same template and rendering as the server (`templates.render.encode_prompt`),
so both count the same prompt tokens. With ``--fill strict|echo`` the decode
loop runs a fill session (no tools here, so strict has no rows to fire; echo
copies from the context). ``--trace FILE`` writes the session's trace there:
without ``--fill`` (or FFWD_FILL) it runs the server's default fill (echo),
since plain decoding has nothing to trace; with ``--fill off`` it is an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from ffwd.cli.args import add_model_arguments, read_template, resolve_ref, template_arguments
from ffwd.config import (
    FILL_MODES,
    SERVER_DEFAULT_FILL,
    resolve_engine_config,
    resolve_fill_config,
)
from ffwd.templates.choose import encode_prompt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--prompt", required=True, help="the user message (or raw text)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--backend", default=None, help="auto|llamacpp|transformers (FFWD_BACKEND)")
    parser.add_argument("--dtype", default=None,
                        help="auto|float32|bfloat16, transformers only (FFWD_DTYPE)")
    parser.add_argument("--device", default=None, help="auto|cpu|cuda (FFWD_DEVICE)")
    parser.add_argument("--threads", default=None, help="compute threads (FFWD_THREADS)")
    parser.add_argument("--kv-cache", default=None,
                        help="llama.cpp: auto|q8_0|f16|bf16 (FFWD_KV_CACHE)")
    parser.add_argument("--flash-attn", default=None,
                        help="llama.cpp: auto|on|off (FFWD_FLASH_ATTN)")
    parser.add_argument("--n-gpu-layers", default=None,
                        help="llama.cpp: layers on the GPU, auto|all|N (FFWD_N_GPU_LAYERS)")
    parser.add_argument("--deterministic", action="store_const", const=True, default=None,
                        help="bit-identical greedy output however forwards are cut "
                        "(FFWD_DETERMINISTIC)")
    parser.add_argument("--raw", action="store_true", help="tokenize the prompt as is")
    template_arguments(parser)
    parser.add_argument("--fill", default=None, choices=FILL_MODES, help="FFWD_FILL")
    parser.add_argument("--max-span", default=None, help="FFWD_FILL_MAX_SPAN")
    parser.add_argument("--trace", default=None,
                        help="FFWD_FILL_TRACE: 1 (checks only) or a .jsonl file to write the "
                        f"fill trace to (fill then defaults to {SERVER_DEFAULT_FILL})")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    from ffwd.engine.core.generate import generate
    from ffwd.engine.sample.sampling import SamplingParams
    from ffwd.fill import FillPlan
    from ffwd.models import load_backend, load_tokenizer

    try:
        engine = resolve_engine_config(overrides={
            "backend": args.backend, "dtype": args.dtype, "device": args.device,
            "threads": args.threads, "kv_cache": args.kv_cache, "n_gpu_layers": args.n_gpu_layers,
            "flash_attn": args.flash_attn, "deterministic": args.deterministic,
            "parallel": 1,  # one generation: one sequence
        })
        fill = resolve_fill_config(
            overrides={"fill": args.fill, "max_span": args.max_span, "trace": args.trace},
            default_mode=SERVER_DEFAULT_FILL if args.trace is not None else "off",
        )
        if fill.trace_path and fill.mode == "off":
            raise ValueError(f"the trace {fill.trace_path} (--trace, FFWD_FILL_TRACE) records "
                             "what fill proposed, and fill is off (--fill echo or strict)")
        params = SamplingParams(
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed
        )
        ref = resolve_ref(args)
    except ValueError as exc:
        print(f"ffwd generate: {exc}", file=sys.stderr)
        return 2
    tokenizer = load_tokenizer(ref)
    try:
        backend = load_backend(ref, **asdict(engine), tokenizer=tokenizer)
        ids = encode_prompt(tokenizer, args.prompt, args.raw, args.tool_format,
                            read_template(args))
    except ValueError as exc:
        print(f"ffwd generate: {exc}", file=sys.stderr)
        return 2
    result = generate(
        backend, tokenizer, ids, params,
        max_tokens=args.max_tokens, stop=args.stop, plan=FillPlan(), fill=fill,
    )
    if args.json:
        out = result.as_dict()
        keep = ("text", "token_ids", "finish_reason", "stats", "forward_calls", "seconds")
        extra = ("prompt_tokens", "completion_tokens", "prefill_seconds")
        print(json.dumps({k: out[k] for k in (*keep, *extra)}, ensure_ascii=False))
    else:
        print(result.text)
    return 0
