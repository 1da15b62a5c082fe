"""`ffwd serve`: load a model and serve the OpenAI-compatible API with uvicorn."""

from __future__ import annotations

import argparse
import gc
import sys

from ffwd.config import FILL_MODES, FillMode, resolve_engine_config, resolve_fill_config

# Chosen from `ffwd bench --workload all --limit 3` (stop 7): echo was not slower than
# off on prose (1.02x decode tok/s) and 1.76x faster on copy-heavy edits.
SERVER_DEFAULT_FILL: FillMode = "echo"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="default, a HF directory or a .gguf file")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    p.add_argument("--max-queue", type=int, default=16, help="requests allowed to wait")
    p.add_argument("--prompt-cache-bytes", type=int, default=1 << 30,
                   help="KV states of other conversations kept, LRU (0 = live cache only)")
    p.add_argument("--tool-format", default=None,
                   help="hermes|qwen_xml|llama3_json|mistral (default: detected from the template)")
    p.add_argument("--dtype", default=None, help="auto|float32|bfloat16 (FFWD_DTYPE)")
    p.add_argument("--device", default=None, help="auto|cpu|cuda|cuda:N (FFWD_DEVICE)")
    p.add_argument("--threads", default=None, help="torch threads, 0 = default (FFWD_THREADS)")
    g = p.add_argument_group("fill (each overrides its FFWD_FILL* variable)")
    g.add_argument("--fill", default=None, choices=FILL_MODES,
                   help=f"FFWD_FILL (server default: {SERVER_DEFAULT_FILL})")
    g.add_argument("--fill-max-span", default=None, help="FFWD_FILL_MAX_SPAN")
    g.add_argument("--fill-append-chunk-size", default=None, help="FFWD_FILL_APPEND_CHUNK_SIZE")
    g.add_argument("--fill-k", default=None, help="FFWD_FILL_K")
    g.add_argument("--fill-candidates", default=None, help="FFWD_FILL_CANDIDATES")
    g.add_argument("--fill-index-max", default=None, help="FFWD_FILL_INDEX_MAX")
    g.add_argument("--fill-trace", default=None, help="FFWD_FILL_TRACE: 1 or a .jsonl path")


def main(args: argparse.Namespace) -> int:
    try:
        fill = resolve_fill_config(overrides={
            "fill": args.fill, "max_span": args.fill_max_span,
            "append_chunk_size": args.fill_append_chunk_size, "k": args.fill_k,
            "candidates": args.fill_candidates, "index_max": args.fill_index_max,
            "trace": args.fill_trace,
        }, default_mode=SERVER_DEFAULT_FILL)
        engine = resolve_engine_config(
            overrides={"dtype": args.dtype, "device": args.device, "threads": args.threads}
        )
        if args.max_queue < 1:
            raise ValueError(f"--max-queue {args.max_queue}: expected an integer >= 1")
        if args.prompt_cache_bytes < 0:
            raise ValueError(f"--prompt-cache-bytes {args.prompt_cache_bytes}: expected >= 0")
        if not 0 < args.port < 65536:
            raise ValueError(f"--port {args.port}: expected 1..65535")
        from ffwd.models import resolve_model

        ref = resolve_model(args.model)
    except (ValueError, FileNotFoundError) as exc:
        print(f"ffwd serve: {exc}", file=sys.stderr)
        return 2

    import uvicorn
    from tqdm import tqdm

    from ffwd.models import load_backend, load_tokenizer
    from ffwd.serve.app import create_app
    from ffwd.serve.service import ModelService

    with tqdm(total=3, desc=f"loading {ref.name}", unit="step", file=sys.stderr) as bar:
        tokenizer = load_tokenizer(ref)
        bar.update()
        backend = load_backend(
            ref, dtype=engine.dtype, device=engine.device,
            prefill_chunk=engine.prefill_chunk, threads=engine.threads,
        )
        bar.update()
        service = ModelService(
            backend, tokenizer, ref.name, fill, tool_format=args.tool_format,
            prompt_cache_bytes=args.prompt_cache_bytes,
        )
        bar.update()
    # The loaded model is permanent: keep the collector from rescanning it in every
    # full collection (one cost ~140 ms in the middle of a request's compile).
    gc.collect()
    gc.freeze()
    app = create_app(service, api_key=args.api_key, max_queue=args.max_queue)
    print(
        f"ffwd serving {ref.name} ({service.format_name} tools, fill {fill.fill}) "
        f"at http://{args.host}:{args.port}/v1",
        file=sys.stderr, flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
