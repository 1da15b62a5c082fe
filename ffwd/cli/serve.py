"""`ffwd serve`: load a model and serve the API with uvicorn (or on Ray Serve replicas)."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from typing import Any

from ffwd.cli.args import (
    add_scale_arguments,
    add_service_arguments,
    deploy_spec,
    read_template,
    resolve_limits,
    resolve_ref,
    resolve_settings,
    wants_replicas,
)
from ffwd.config import (
    DEFAULT_SHUTDOWN_GRACE,
    LOG_FORMATS,
    EngineConfig,
    FillConfig,
    TokenLimits,
    resolve_cors_origins,
    resolve_keep_alive,
    resolve_log_format,
    resolve_shutdown_grace,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_service_arguments(p)
    p.add_argument("--log-format", default=None, choices=LOG_FORMATS,
                   help="how the log's lines are written, one line per request among them: "
                   "text (key=value) or json (FFWD_LOG_FORMAT; default: text)")
    p.add_argument("--shutdown-grace", default=None,
                   help="seconds the running requests get to finish on SIGTERM or SIGINT, "
                   "while new and waiting ones get 503; then they are cut "
                   f"(FFWD_SHUTDOWN_GRACE; default: {DEFAULT_SHUTDOWN_GRACE})")
    add_scale_arguments(p, join=True)


def main(args: argparse.Namespace) -> int:
    try:
        fill, engine = resolve_settings(args)
        limits = resolve_limits(args)
        if fill.trace_path:
            _check_trace_file(fill.trace_path)
        log_format = resolve_log_format(args.log_format)
        origins = resolve_cors_origins(args.cors_origins)
        keep_alive = resolve_keep_alive(args.keep_alive_timeout)
        grace = resolve_shutdown_grace(args.shutdown_grace)
        spec = deploy_spec(args, fill, engine) if wants_replicas(args) else None
        # Fail fast on a model this machine cannot load (a joined cluster's nodes may).
        ref = resolve_ref(args) if spec is None or args.ray_address is None else None
    except (ValueError, FileNotFoundError) as exc:
        print(f"ffwd serve: {exc}", file=sys.stderr)
        return 2
    # Our own log lines (one per request, a failed generation's traceback) go to stderr.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    from ffwd.serve.access import configure_logging

    configure_logging(log_format)
    if spec is not None:
        from ffwd.deploy.run import serve_replicas

        return serve_replicas(replace(spec, log_format=log_format), args.ray_address)
    assert ref is not None
    return _serve_here(args, ref, fill, engine, limits, origins, (keep_alive, grace))


def _serve_here(args: argparse.Namespace, ref: Any, fill: FillConfig, engine: EngineConfig,
                limits: TokenLimits, origins: tuple[str, ...],
                timeouts: tuple[int, int]) -> int:
    keep_alive, grace = timeouts
    from tqdm import tqdm

    from ffwd.engine.promise import loaded_promise
    from ffwd.serve.app import create_app
    from ffwd.serve.execute import LocalExecutor
    from ffwd.serve.server import run_server
    from ffwd.serve.service import load_service

    name = ref.name
    with tqdm(total=3, desc=f"loading {name}", unit="step", file=sys.stderr) as bar:
        try:
            service = load_service(
                ref, engine, fill, tool_format=args.tool_format,
                chat_template=read_template(args), reasoning=args.reasoning,
                prompt_cache_bytes=args.prompt_cache_bytes, limits=limits,
                on_step=lambda step: bar.update(),
                progress=lambda text: bar.write(f"measuring attention paths: {text}",
                                                file=sys.stderr),
            )
        except ValueError as exc:  # no engine for this model here, or a foreign tokenizer
            print(f"ffwd serve: {exc}", file=sys.stderr)
            return 2
    app = create_app(service, api_key=args.api_key, max_queue=args.max_queue,
                     max_body_bytes=args.max_body_bytes, cors_origins=origins,
                     keep_alive=keep_alive)
    backend = service.backend
    print(f"greedy determinism: {loaded_promise(backend)[1]}", file=sys.stderr)
    if backend.attention_table is not None:
        lines = backend.attention_table.describe(backend.context_window)
        print("attention paths (ms per 1 id/16 ids by depth, an agent turn's expected time):\n"
              + "\n".join(lines), file=sys.stderr)
    if backend.cost is not None:
        print(f"forward cost: {backend.cost.describe()}", file=sys.stderr)
    from ffwd.engine.llama.context import LlamaContext

    if isinstance(ctx := backend.context, LlamaContext):
        print(f"llama.cpp: {ctx.load.describe()}", file=sys.stderr)
        print(f"parallel: {service.parallel} requests decode together, each a KV cache of "
              f"{backend.context_window} ids; prompts go in chunks of {ctx.budget} "
              "ids per step while others decode", file=sys.stderr)
    print(service.format_note, file=sys.stderr)
    print(service.reasoning_note, file=sys.stderr)
    tools = f"{service.format_name} tools" if service.format else "no tools"
    print(
        f"ffwd serving {name} on {backend.engine} ({tools}, fill "
        f"{service.fill.mode}) at http://{args.host}:{args.port}/v1",
        file=sys.stderr, flush=True,
    )
    from ffwd.serve.cors import CorsPolicy

    print(f"browser origins that may call it: {CorsPolicy(origins).describe()}",
          file=sys.stderr, flush=True)
    executor: LocalExecutor = app.state.executor
    run_server(app, host=args.host, port=args.port, keep_alive=keep_alive, grace=grace,
               executor=executor)
    return 0


def _check_trace_file(path: str) -> None:
    """Fail at start, not on every request, when the trace file cannot be appended to."""
    from ffwd.fill import TraceWriter

    try:
        TraceWriter(path).close()
    except OSError as exc:
        raise ValueError(f"FFWD_FILL_TRACE={path!r}: cannot append to it ({exc})") from None
