"""`ffwd serve`: load a model and serve the OpenAI-compatible API with uvicorn."""

from __future__ import annotations

import argparse
import sys

from ffwd.config import (
    FILL_MODES,
    EngineConfig,
    FillConfig,
    FillMode,
    resolve_engine_config,
    resolve_fill_config,
)
from ffwd.serve.body import DEFAULT_MAX_BYTES
from ffwd.serve.service import DEFAULT_PROMPT_CACHE_BYTES

# Chosen from `ffwd bench --workload all --limit 3` (stop 7): echo was not slower than
# off on prose (1.02x decode tok/s) and 1.76x faster on copy-heavy edits.
SERVER_DEFAULT_FILL: FillMode = "echo"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_service_arguments(p)
    from ffwd.deploy.cli import add_scale_arguments

    add_scale_arguments(p, join=True)


def add_service_arguments(p: argparse.ArgumentParser) -> None:
    """The model, HTTP, engine and fill flags (shared with `ffwd deploy config`)."""
    p.add_argument("--model", default="default",
                   help="default (the embedded SmolLM2-135M-Instruct), a HF directory or a .gguf "
                   "file (default: default)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="(default: 8000)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: none, open)")
    p.add_argument("--max-queue", type=int, default=16,
                   help="requests allowed to wait; more get 429 (default: 16)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BYTES,
                   help=f"largest request body; larger get 413 (default: {DEFAULT_MAX_BYTES})")
    p.add_argument("--prompt-cache-bytes", type=int, default=DEFAULT_PROMPT_CACHE_BYTES,
                   help="KV states of other conversations kept, LRU; 0 = live cache only "
                   f"(default: {DEFAULT_PROMPT_CACHE_BYTES})")
    p.add_argument("--tool-format", default=None,
                   help="hermes|qwen_xml|llama3_json|mistral (default: detected from the template)")
    p.add_argument("--backend", default=None,
                   help="auto|llamacpp|transformers (FFWD_BACKEND; default: auto = llama.cpp "
                   "for a .gguf on the CPU, else transformers)")
    p.add_argument("--dtype", default=None,
                   help="transformers: auto|float32|bfloat16|float16 (FFWD_DTYPE; default: auto "
                   "= bfloat16 on CUDA and on CPUs with native bfloat16, else float32)")
    p.add_argument("--device", default=None,
                   help="auto|cpu|cuda|cuda:N (FFWD_DEVICE; default: auto = cuda when available)")
    p.add_argument("--threads", default=None,
                   help="compute threads, 0 = torch's default (FFWD_THREADS; default: 0)")
    p.add_argument("--context", default=None,
                   help="llama.cpp context in ids, 0 = the model's up to 8192 (FFWD_CONTEXT; "
                   "default: 0)")
    g = p.add_argument_group("fill (each overrides its FFWD_FILL* variable)")
    g.add_argument("--fill", default=None, choices=FILL_MODES,
                   help=f"FFWD_FILL (default for the server: {SERVER_DEFAULT_FILL})")
    g.add_argument("--fill-max-span", default=None, help="FFWD_FILL_MAX_SPAN (default: 32)")
    g.add_argument("--fill-append-chunk-size", default=None,
                   help="FFWD_FILL_APPEND_CHUNK_SIZE (default: 0 = the backend's limit)")
    g.add_argument("--fill-k", default=None, help=f"FFWD_FILL_K (default: {FillConfig().k})")
    g.add_argument("--fill-candidates", default=None,
                   help=f"FFWD_FILL_CANDIDATES (default: {FillConfig().candidates})")
    g.add_argument("--fill-index-max", default=None, help="FFWD_FILL_INDEX_MAX (default: 131072)")
    g.add_argument("--fill-trace", default=None,
                   help="FFWD_FILL_TRACE: 1 (cache checks) or a .jsonl file every request is "
                   "traced to; requests may switch it off (default: off)")
    g.add_argument("--grammar", default=None, choices=("on", "off"),
                   help="FFWD_GRAMMAR: constrain tool calls with a grammar so that required and "
                   "named tool_choice always return a valid call (default: on)")


def resolve_settings(args: argparse.Namespace) -> tuple[FillConfig, EngineConfig]:
    """The fill and engine settings the flags give; the other values checked (ValueError)."""
    fill = resolve_fill_config(overrides={
        "fill": args.fill, "max_span": args.fill_max_span,
        "append_chunk_size": args.fill_append_chunk_size, "k": args.fill_k,
        "candidates": args.fill_candidates, "index_max": args.fill_index_max,
        "trace": args.fill_trace, "grammar": args.grammar,
    }, default_mode=SERVER_DEFAULT_FILL)
    engine = resolve_engine_config(overrides={
        "backend": args.backend, "dtype": args.dtype, "device": args.device,
        "threads": args.threads, "context": args.context,
    })
    check_limits(args.max_queue, args.prompt_cache_bytes, args.port, args.max_body_bytes)
    return fill, engine


def check_limits(max_queue: int, prompt_cache_bytes: int, port: int, max_body_bytes: int) -> None:
    if max_queue < 1:
        raise ValueError(f"--max-queue {max_queue}: expected an integer >= 1")
    if prompt_cache_bytes < 0:
        raise ValueError(f"--prompt-cache-bytes {prompt_cache_bytes}: expected >= 0")
    if not 0 < port < 65536:
        raise ValueError(f"--port {port}: expected 1..65535")
    if max_body_bytes < 1024:
        raise ValueError(f"--max-body-bytes {max_body_bytes}: expected >= 1024")


def main(args: argparse.Namespace) -> int:
    from ffwd.deploy.cli import replica_spec

    try:
        fill, engine = resolve_settings(args)
        if fill.trace_path:
            _check_trace_file(fill.trace_path)
        spec = replica_spec(args, fill, engine)  # None: no --replicas, serve in this process
        from ffwd.models import resolve_model

        # Fail fast on a model this machine cannot load (a joined cluster's nodes may).
        ref = resolve_model(args.model) if spec is None or args.ray_address is None else None
    except (ValueError, FileNotFoundError) as exc:
        print(f"ffwd serve: {exc}", file=sys.stderr)
        return 2
    if spec is not None:
        from ffwd.deploy.run import serve_replicas

        return serve_replicas(spec, args.ray_address)
    assert ref is not None

    import uvicorn
    from tqdm import tqdm

    from ffwd.info import curve_text, loaded_promise
    from ffwd.serve.app import create_app
    from ffwd.serve.service import load_service

    with tqdm(total=3, desc=f"loading {ref.name}", unit="step", file=sys.stderr) as bar:
        try:
            service = load_service(
                args.model, engine, fill, tool_format=args.tool_format,
                prompt_cache_bytes=args.prompt_cache_bytes, on_step=lambda name: bar.update(),
            )
        except ValueError as exc:  # no engine for this model here, or a foreign tokenizer
            print(f"ffwd serve: {exc}", file=sys.stderr)
            return 2
    app = create_app(service, api_key=args.api_key, max_queue=args.max_queue,
                     max_body_bytes=args.max_body_bytes)
    print(f"greedy determinism: {loaded_promise(service.backend)[1]}", file=sys.stderr)
    if getattr(service.backend, "cost", None) is not None:
        print(f"forward cost: {curve_text(service.backend.cost)}", file=sys.stderr)
    print(
        f"ffwd serving {ref.name} on {getattr(service.backend, 'engine', 'transformers')} "
        f"({service.format_name} tools, fill {fill.fill}) "
        f"at http://{args.host}:{args.port}/v1",
        file=sys.stderr, flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _check_trace_file(path: str) -> None:
    """Fail at start, not on every request, when the trace file cannot be appended to."""
    from ffwd.fill import TraceWriter

    try:
        TraceWriter(path).close()
    except OSError as exc:
        raise ValueError(f"FFWD_FILL_TRACE={path!r}: cannot append to it ({exc})") from None

