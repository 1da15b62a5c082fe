"""The flags `ffwd serve` and `ffwd deploy config` share, and what they resolve to.

`add_service_arguments` (model, HTTP, engine and fill flags) and
`add_scale_arguments` (replicas, routing); `resolve_settings` turns the flags
into the fill and engine settings (`ffwd.config`, which also checks the
server's limits), and `deploy_spec` into a `DeploySpec` for Ray Serve.
"""

from __future__ import annotations

import argparse
from typing import Any

from ffwd.config import (
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUE,
    DEFAULT_PARALLEL,
    DEFAULT_PROMPT_CACHE_BYTES,
    FILL_MODES,
    FLASH_ATTNS,
    KV_CACHES,
    ROUTERS,
    SERVER_DEFAULT_FILL,
    EngineConfig,
    FillConfig,
    TokenLimits,
    check_limits,
    resolve_cors_origins,
    resolve_engine_config,
    resolve_fill_config,
    resolve_keep_alive,
    resolve_model_places,
    resolve_scale_config,
    resolve_token_limits,
)

SCALE_FLAGS = ("replicas", "min_replicas", "max_replicas", "target_ongoing", "max_ongoing",
               "replica_cpus", "replica_gpus", "router", "imbalance")


MODEL_HELP = ("default (the embedded SmolLM2-135M-Instruct), gemma3, a path (a .gguf, the "
              "first part of a split GGUF, a HF directory), a Hub name ORG/NAME[:QUANT], an "
              "Ollama name MODEL[:TAG] or an LM Studio PUBLISHER/REPO; every local place first, "
              "then a Hub download (docs/models.md; `ffwd models` lists what is here; "
              "default: default)")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model and --offline."""
    p.add_argument("--model", default="default", help=MODEL_HELP)
    p.add_argument("--offline", action="store_true",
                   help="never reach the network: a model no local place holds is not "
                   "downloaded (as HF_HUB_OFFLINE=1)")


def resolve_ref(args: argparse.Namespace) -> Any:
    """The `ffwd.models.ModelRef` --model names (`ffwd.models.resolve_model`), never
    downloaded under --offline; `ValueError` (`ModelNotFound`) naming where it looked."""
    from ffwd.models import resolve_model

    return resolve_model(args.model, resolve_model_places(offline=args.offline))


def add_service_arguments(p: argparse.ArgumentParser) -> None:
    """The model, HTTP, engine and fill flags."""
    add_model_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="(default: 8000)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: none, open)")
    p.add_argument("--cors-origins", default=None,
                   help="web pages (origins, comma-separated, or *) that may call the API "
                   "from a browser besides the server's own and localhost ones; any other "
                   "origin gets 403 (FFWD_CORS_ORIGINS; default: none)")
    p.add_argument("--keep-alive-timeout", default=None,
                   help="seconds an idle client connection is kept open; every response says "
                   "so in 'Keep-Alive: timeout=N' (FFWD_KEEP_ALIVE; default: "
                   f"{DEFAULT_KEEP_ALIVE}, longer than common clients keep theirs)")
    p.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                   help=f"requests allowed to wait; more get 429 (default: {DEFAULT_MAX_QUEUE})")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="largest request body; larger get 413 "
                   f"(default: {DEFAULT_MAX_BODY_BYTES})")
    p.add_argument("--prompt-cache-bytes", type=int, default=DEFAULT_PROMPT_CACHE_BYTES,
                   help="KV states of other conversations kept, LRU; 0 = live cache only "
                   f"(default: {DEFAULT_PROMPT_CACHE_BYTES})")
    template_arguments(p)
    limits = TokenLimits()
    p.add_argument("--default-max-tokens", default=None,
                   help="output tokens of a request that names no max_tokens "
                   f"(FFWD_DEFAULT_MAX_TOKENS; default: {limits.default})")
    p.add_argument("--max-tokens-limit", default=None,
                   help="the most output tokens one request generates; a request asking for "
                   "more is capped to it, its usage saying so "
                   f"(FFWD_MAX_TOKENS_LIMIT; default: {limits.limit})")
    p.add_argument("--strict-max-tokens", action="store_const", const=True, default=None,
                   help="refuse a request asking for more than --max-tokens-limit (a 400) "
                   "instead of capping it (FFWD_STRICT_MAX_TOKENS)")
    _engine_arguments(p)
    _fill_arguments(p)


def _engine_arguments(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--kv-cache", default=None, choices=KV_CACHES,
                   help="llama.cpp's KV cache type; auto: f16 and q8_0 are timed with "
                   "--flash-attn and the fastest kept, or with --deterministic q8_0 (bf16 where "
                   "the heads' sizes do not fit q8_0) and bf16 (FFWD_KV_CACHE; default: auto)")
    p.add_argument("--flash-attn", default=None, choices=FLASH_ATTNS,
                   help="llama.cpp's flash attention; auto: on and off are timed at the first "
                   "load on this machine and the fastest for agent turns kept (`ffwd info` "
                   "shows the table) (FFWD_FLASH_ATTN; default: auto)")
    p.add_argument("--deterministic", action="store_const", const=True, default=None,
                   help="bit-identical greedy output however forwards are cut: fill on or off, "
                   "a cold or warm prompt cache, streamed or whole (a q8_0 KV cache, float32, "
                   "the CPU; slower prefill) (FFWD_DETERMINISTIC; default: off)")
    p.add_argument("--parallel", default=None,
                   help="llama.cpp: requests decoded side by side, each with its own KV cache of "
                   "--context ids; one forward per step carries every running request's ids "
                   f"(FFWD_PARALLEL; default: {DEFAULT_PARALLEL})")
    p.add_argument("--n-gpu-layers", default=None,
                   help="llama.cpp: layers offloaded to the GPU, auto|all|N (FFWD_N_GPU_LAYERS; "
                   "default: auto = all where the build can offload, else none)")
    p.add_argument("--tie-margin", default=None,
                   help="greedy verify keeps a draft id whose logit is within this of the best: "
                   "off, auto (the attention path's own measured rounding, so a repeated "
                   "request follows its earlier reply on a path that is not exact) or logits; "
                   "never with --deterministic (FFWD_TIE_MARGIN; default: auto)")


def _fill_arguments(p: argparse.ArgumentParser) -> None:
    d = FillConfig()
    g = p.add_argument_group("fill (each overrides its FFWD_FILL* variable)")
    g.add_argument("--fill", default=None, choices=FILL_MODES,
                   help=f"FFWD_FILL (default for the server: {SERVER_DEFAULT_FILL})")
    g.add_argument("--fill-max-span", default=None,
                   help=f"FFWD_FILL_MAX_SPAN (default: {d.max_span})")
    g.add_argument("--fill-append-chunk-size", default=None,
                   help="FFWD_FILL_APPEND_CHUNK_SIZE (default: 0 = the backend's limit)")
    g.add_argument("--fill-k", default=None, help=f"FFWD_FILL_K (default: {d.k})")
    g.add_argument("--fill-candidates", default=None,
                   help=f"FFWD_FILL_CANDIDATES (default: {d.candidates})")
    g.add_argument("--fill-index-max", default=None,
                   help=f"FFWD_FILL_INDEX_MAX (default: {d.index_max})")
    g.add_argument("--fill-trace", default=None,
                   help="FFWD_FILL_TRACE: 1 (cache checks) or a .jsonl file every request is "
                   "traced to; requests may switch it off (default: off)")
    g.add_argument("--fill-recall", default=None, choices=("on", "off"),
                   help="FFWD_FILL_RECALL: echo also copies from earlier requests' outputs, "
                   "per API key (default: on)")
    g.add_argument("--fill-recall-bytes", default=None,
                   help=f"FFWD_FILL_RECALL_BYTES: their index's memory, 0 = none (default: "
                   f"{d.recall_bytes})")
    g.add_argument("--grammar", default=None, choices=("on", "off"),
                   help="FFWD_GRAMMAR: constrain tool calls with a grammar so that required and "
                   "named tool_choice always return a valid call (default: on)")


def add_scale_arguments(p: argparse.ArgumentParser, *, join: bool) -> None:
    """The replica flags; `join` adds --ray-address (`ffwd serve` runs the deployment)."""
    g = p.add_argument_group("scale out on Ray Serve (pip install 'ffwd[ray]')")
    g.add_argument("--replicas", default=None,
                   help="model replicas behind one HTTP port (with --max-replicas: the start "
                   "count); `ffwd serve` without it runs one model in this process")
    g.add_argument("--min-replicas", default=None, help="autoscaling lower bound (1)")
    g.add_argument("--max-replicas", default=None, help="autoscaling upper bound: turns it on")
    g.add_argument("--target-ongoing", default=None,
                   help="requests per replica the autoscaler aims at (2)")
    g.add_argument("--max-ongoing", default=None,
                   help="requests one replica holds, running and waiting (--parallel + 1); the "
                   "rest wait at the router, at most --max-queue, then 429")
    g.add_argument("--replica-cpus", default=None,
                   help="CPUs reserved per replica, also its torch threads (1)")
    g.add_argument("--replica-gpus", default=None, help="GPUs reserved per replica (0)")
    g.add_argument("--router", default=None, choices=ROUTERS,
                   help="affine: the replica holding the prompt's longest cached prefix when "
                   "load is balanced, else the least loaded (default); pow2: Ray's default")
    g.add_argument("--route-imbalance", dest="imbalance", default=None,
                   help="requests the affine replica may hold beyond the least loaded (1)")
    if join:
        g.add_argument("--ray-address", default=None,
                       help="join this Ray cluster (default: start a local one)")


def resolve_limits(args: argparse.Namespace) -> TokenLimits:
    """The output limits per request the flags (and the environment) give."""
    return resolve_token_limits(overrides={
        "default": args.default_max_tokens, "limit": args.max_tokens_limit,
        "strict": args.strict_max_tokens})


def resolve_settings(args: argparse.Namespace) -> tuple[FillConfig, EngineConfig]:
    """The fill and engine settings the flags give; the other values checked (ValueError)."""
    fill = resolve_fill_config(overrides={
        "fill": args.fill, "max_span": args.fill_max_span,
        "append_chunk_size": args.fill_append_chunk_size, "k": args.fill_k,
        "candidates": args.fill_candidates, "index_max": args.fill_index_max,
        "trace": args.fill_trace, "grammar": args.grammar, "recall": args.fill_recall,
        "recall_bytes": args.fill_recall_bytes,
    }, default_mode=SERVER_DEFAULT_FILL)
    engine = resolve_engine_config(overrides={
        "backend": args.backend, "dtype": args.dtype, "device": args.device,
        "threads": args.threads, "context": args.context, "kv_cache": args.kv_cache,
        "flash_attn": args.flash_attn,
        "n_gpu_layers": args.n_gpu_layers, "deterministic": args.deterministic,
        "parallel": args.parallel, "tie_margin": args.tie_margin,
    })
    check_limits(args.max_queue, args.prompt_cache_bytes, args.port, args.max_body_bytes)
    return fill, engine


def template_arguments(p: argparse.ArgumentParser) -> None:
    """``--tool-format``, ``--chat-template`` and ``--reasoning`` (serve, info, generate)."""
    from ffwd.templates.formats import FORMATS

    p.add_argument("--tool-format", default=None, choices=list(FORMATS), metavar="FORMAT",
                   help="the tool-call format to use (default: recognised from the chat "
                   f"template): {', '.join(FORMATS)}")
    p.add_argument("--chat-template", default=None, metavar="FILE",
                   help="a Jinja chat template to serve the model with instead of its own")
    p.add_argument("--reasoning", default="auto", choices=("on", "off", "auto"),
                   help="whether a reasoning model thinks before it answers where a request "
                   "does not say (auto: as its chat template does by default)")


def read_template(args: argparse.Namespace) -> str | None:
    """The text of ``--chat-template``, or None; a ValueError naming the file otherwise."""
    if getattr(args, "chat_template", None) is None:
        return None
    try:
        with open(args.chat_template, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"--chat-template {args.chat_template}: {exc.strerror}") from None


def wants_replicas(args: argparse.Namespace) -> bool:
    """Whether any scale-out flag was given (`ffwd serve` then runs on Ray Serve)."""
    given = [getattr(args, k) for k in (*SCALE_FLAGS, "ray_address") if hasattr(args, k)]
    return any(v is not None for v in given)


def deploy_spec(args: argparse.Namespace, fill: FillConfig, engine: EngineConfig) -> Any:
    """The `ffwd.deploy.spec.DeploySpec` the flags describe."""
    from ffwd.deploy.spec import DeploySpec

    return DeploySpec(
        args.model, fill, engine, resolve_scale_config({k: getattr(args, k) for k in SCALE_FLAGS}),
        args.tool_format, read_template(args), args.prompt_cache_bytes, args.api_key,
        args.max_queue,
        args.max_body_bytes, args.host, args.port, resolve_limits(args),
        cors_origins=resolve_cors_origins(args.cors_origins),
        keep_alive=resolve_keep_alive(args.keep_alive_timeout),
    )
