"""Every FFWD_* setting, resolved and validated in one place.

Values come from the environment or from explicit overrides (CLI flags, the
``ffwd`` object of a request). A malformed value raises `ValueError` naming
the variable, the value and what is accepted; nothing falls back silently.
No other module in the package reads `os.environ`.

    FFWD_FILL                   off|strict|echo (0/1 alias off/strict)   off
    FFWD_FILL_MAX_SPAN          longest injected span, 2..4096            32
    FFWD_FILL_APPEND_CHUNK_SIZE ids per append forward, 0 = backend max   0
    FFWD_FILL_K                 echo anchor length, 2..64                 3
    FFWD_FILL_CANDIDATES        echo occurrences kept per k-gram, 1..1024 8
    FFWD_FILL_INDEX_MAX         ids the echo index remembers, >= 1024     131072
    FFWD_FILL_TRACE             1 (checks) or a .jsonl path (records)     off
    FFWD_GRAMMAR                on|off: constrain tool calls by grammar   on
    FFWD_FILL_RECALL            on|off: echo from earlier outputs too     on
    FFWD_FILL_RECALL_BYTES      the earlier outputs' index, 0 = none      64 MiB
    FFWD_CACHE_DIR              converted models and tokenizers           ~/.cache/ffwd

A request's ``ffwd`` object may override the fill settings (`FillConfig.for_request`),
with JSON types only and never a resource of the server: tracing can be switched
off, or on when the operator configured it, but the trace file is the server's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ffwd.fill.echo import EchoConfig
from ffwd.values import (
    Parser,
    SettingError,
    choice,
    flag,
    float_at_least,
    int_in,
    parse_settings,
    trace_target,
)

FillMode = Literal["off", "strict", "echo"]
FILL_MODES: tuple[FillMode, ...] = ("off", "strict", "echo")

_MODE_ALIASES: dict[str, FillMode] = {
    "": "off", "off": "off", "0": "off",
    "strict": "strict", "1": "strict",
    "echo": "echo",
}


def resolve_fill_mode(raw: object) -> FillMode:
    """Map a raw FFWD_FILL value to off|strict|echo, or raise naming FFWD_FILL."""
    if raw is None:
        return "off"
    key = raw.strip().lower() if isinstance(raw, str) else raw
    if isinstance(key, str) and key in _MODE_ALIASES:
        return _MODE_ALIASES[key]
    raise SettingError("FFWD_FILL", raw, "off|strict|echo (or 0/1 for off/strict)")


# field -> (environment variable, parser); the request and the flags say "fill" for `mode`.
_FILL_SETTINGS: dict[str, tuple[str, Parser]] = {
    "mode": ("FFWD_FILL", resolve_fill_mode),
    "max_span": ("FFWD_FILL_MAX_SPAN", int_in("FFWD_FILL_MAX_SPAN", 2, 4096)),
    "append_chunk_size": (
        "FFWD_FILL_APPEND_CHUNK_SIZE", int_in("FFWD_FILL_APPEND_CHUNK_SIZE", 0, 1 << 16),
    ),
    "k": ("FFWD_FILL_K", int_in("FFWD_FILL_K", 2, 64)),
    "candidates": ("FFWD_FILL_CANDIDATES", int_in("FFWD_FILL_CANDIDATES", 1, 1024)),
    "index_max": ("FFWD_FILL_INDEX_MAX", int_in("FFWD_FILL_INDEX_MAX", 1024, 1 << 24)),
    "trace": ("FFWD_FILL_TRACE", trace_target),
    "grammar": ("FFWD_GRAMMAR", flag("FFWD_GRAMMAR", "on or off (or 1/0)")),
    "recall": ("FFWD_FILL_RECALL", flag("FFWD_FILL_RECALL", "on or off (or 1/0)")),
    "recall_bytes": ("FFWD_FILL_RECALL_BYTES",
                     int_in("FFWD_FILL_RECALL_BYTES", 0, 1 << 40)),
}
_FILL_ALIASES = {"fill": "mode"}
# The JSON type each request override must have (strict: no "8" for 8, no true for 1).
REQUEST_FILL_TYPES: dict[str, type] = {
    "fill": str, "max_span": int, "append_chunk_size": int, "k": int, "candidates": int,
    "index_max": int, "trace": bool, "grammar": bool, "recall": bool,
}


@dataclass(frozen=True, slots=True)
class FillConfig:
    """Resolved fill settings for a process or a request: every fill default, written
    once (they come from `ffwd bench` and `python -m ffwd.bench.acceptance`)."""

    mode: FillMode = "off"
    max_span: int = 32
    append_chunk_size: int = 0
    k: int = 3
    candidates: int = 8
    index_max: int = 131072
    trace: str | bool = False
    # Tool calls under a grammar (ffwd.grammar); response_format is constrained either way.
    grammar: bool = True
    # Echo also copies from earlier requests' outputs (ffwd.fill.recall), in an index of
    # at most `recall_bytes` per server (0: none); a request may switch it off.
    recall: bool = True
    recall_bytes: int = 64 << 20

    @property
    def strict_rows(self) -> bool:
        """Whether template and schema rows fire (in ``strict`` and in ``echo``)."""
        return self.mode in ("strict", "echo")

    @property
    def trace_path(self) -> str | None:
        return self.trace if isinstance(self.trace, str) else None

    @property
    def trace_checks(self) -> bool:
        """Cache-alignment assertions are on whenever tracing is on."""
        return self.trace is not False

    def echo_config(self) -> EchoConfig | None:
        if self.mode != "echo":
            return None
        return EchoConfig(
            k=self.k, max_span=self.max_span,
            max_candidates=self.candidates, index_max=self.index_max,
        )

    def with_overrides(self, overrides: Mapping[str, object] | None) -> FillConfig:
        """A copy with trusted (CLI, library) overrides applied (None values ignored)."""
        if not overrides:
            return self
        return replace(self, **parse_settings("fill", _FILL_SETTINGS, {}, overrides, _FILL_ALIASES))

    def for_request(self, overrides: Mapping[str, object] | None) -> FillConfig:
        """A copy with a request's ``ffwd`` overrides applied, under the request rules.

        Values must have their JSON type (`REQUEST_FILL_TYPES`) and the same
        ranges as the variables. ``trace`` is a switch only: ``false`` turns
        tracing off for this request, ``true`` keeps the server's own setting
        and is refused when the operator did not configure tracing. A request
        never names a file. Raises `SettingError` named ``ffwd.<key>``.

        >>> FillConfig(trace="/var/log/t.jsonl").for_request({"trace": False}).trace
        False
        >>> FillConfig().for_request({"k": "4"})
        Traceback (most recent call last):
        ...
        ffwd.values.SettingError: ffwd.k='4': expected a JSON integer
        """
        values: dict[str, Any] = {}
        for key, raw in (overrides or {}).items():
            name = f"ffwd.{key}"
            kind = REQUEST_FILL_TYPES.get(key)
            if kind is None:
                keys = ", ".join(REQUEST_FILL_TYPES)
                msg = f"unknown setting {name}: expected one of {keys}"
                raise SettingError(name, raw, keys, msg)
            if raw is None:
                continue
            if type(raw) is not kind:
                raise SettingError(name, raw, f"a JSON {_JSON_NAMES[kind]}")
            if key == "trace":
                if raw and self.trace is False:
                    raise SettingError(name, raw, "false: tracing is off on this server (the "
                                       "operator turns it on with FFWD_FILL_TRACE or --fill-trace)")
                values["trace"] = self.trace if raw else False
                continue
            field = _FILL_ALIASES.get(key, key)
            try:
                values[field] = _FILL_SETTINGS[field][1](raw)
            except SettingError as exc:
                raise SettingError(name, raw, exc.expected) from None
        return replace(self, **values)


_JSON_NAMES = {str: "string", int: "integer", bool: "boolean (true or false)"}

# --- the server (ffwd serve, and every replica under ffwd.deploy) -------------
#
# Fill mode: chosen from `ffwd bench --workload all` (README's performance
# section): echo was the fastest mode on forced calls, edits and prose.
SERVER_DEFAULT_FILL: FillMode = "echo"
DEFAULT_MAX_QUEUE = 16  # requests allowed to wait for the model; more get 429
DEFAULT_MAX_BODY_BYTES = 4 << 20  # larger request bodies get 413
DEFAULT_PROMPT_CACHE_BYTES = 1 << 30  # KV states of other conversations kept, LRU
#     FFWD_DEFAULT_MAX_TOKENS  output ids when a request names no limit     1024
#     FFWD_MAX_TOKENS_LIMIT    the most output ids a request may ask for     4096
# One request holds the only worker while it decodes: ~90 ids/s here, so the
# limit bounds a request to under a minute unless the operator allows more.


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """How many ids one request may generate: `default` when it names no limit, and at
    most `limit` (a request over it is a 400 that names it)."""

    default: int = 1024
    limit: int = 4096

    def __post_init__(self) -> None:
        if not 1 <= self.default <= self.limit:
            raise ValueError(f"--default-max-tokens {self.default}: expected an integer from "
                             f"1 to --max-tokens-limit ({self.limit})")


_TOKEN_LIMITS: dict[str, tuple[str, Parser]] = {
    "default": ("FFWD_DEFAULT_MAX_TOKENS", int_in("FFWD_DEFAULT_MAX_TOKENS", 1, 1 << 24)),
    "limit": ("FFWD_MAX_TOKENS_LIMIT", int_in("FFWD_MAX_TOKENS_LIMIT", 1, 1 << 24)),
}


def resolve_token_limits(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
) -> TokenLimits:
    """The output limits from the environment (or `env`), then non-None `overrides`."""
    env = os.environ if env is None else env
    return TokenLimits(**parse_settings("token limit", _TOKEN_LIMITS, env, overrides))


def check_limits(max_queue: int, prompt_cache_bytes: int, port: int, max_body_bytes: int) -> None:
    """Raise `ValueError` naming the flag of any server limit out of range."""
    if max_queue < 1:
        raise ValueError(f"--max-queue {max_queue}: expected an integer >= 1")
    if prompt_cache_bytes < 0:
        raise ValueError(f"--prompt-cache-bytes {prompt_cache_bytes}: expected >= 0")
    if not 0 < port < 65536:
        raise ValueError(f"--port {port}: expected 1..65535")
    if max_body_bytes < 1024:
        raise ValueError(f"--max-body-bytes {max_body_bytes}: expected >= 1024")


def resolve_fill_config(
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    default_mode: FillMode = "off",
) -> FillConfig:
    """Fill settings from the environment (or `env`), then `overrides` on top.

    `default_mode` applies when neither says which mode (the server passes its own).
    """
    env = os.environ if env is None else env
    base = FillConfig(mode=resolve_fill_mode(default_mode))
    return replace(base, **parse_settings("fill", _FILL_SETTINGS, env, overrides, _FILL_ALIASES))


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where converted models and tokenizers are kept (FFWD_CACHE_DIR)."""
    env = os.environ if env is None else env
    raw = env.get("FFWD_CACHE_DIR", "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ffwd"


# --- engine settings ---------------------------------------------------------
#
#     FFWD_BACKEND        auto|llamacpp|transformers (models.choose_backend)  auto
#     FFWD_DTYPE          auto|float32|bfloat16|float16 (transformers)       auto
#     FFWD_DEVICE         auto|cpu|cuda|cuda:N                               auto
#     FFWD_THREADS        compute threads, 0 = torch's default               0
#     FFWD_PREFILL_CHUNK  prompt ids per prefill forward, >= 1               512
#     FFWD_CONTEXT        llama.cpp context ids, 0 = the model's (<= 8192)   0
#     FFWD_LLAMACPP_LOG   1 = llama.cpp's own log lines on stderr            0
#     FFWD_KV_CACHE       llama.cpp's cache: auto|q8_0|f16|bf16              auto
#
# The KV cache's type decides which attention kernel llama.cpp runs: with an f16
# cache a one-id forward splits its attention over the threads (past 256 ids) and
# a batch of 64 or more takes a tiled kernel, so both round differently from the
# rest; with q8_0 (or bf16) every forward takes the same per-row kernel, and greedy
# output no longer depends on fill or on the prompt cache (ffwd.bench.agreement).
# auto: q8_0 where the model's head sizes fit its 32-value blocks, else bf16.

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: tuple[Dtype, ...] = ("auto", "float32", "bfloat16", "float16")
resolve_dtype: Callable[[object], Dtype] = choice(
    "FFWD_DTYPE", DTYPES, {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"})


def resolve_device(raw: object) -> str:
    """auto, cpu, cuda or cuda:N; raise naming FFWD_DEVICE otherwise."""
    s = raw.strip().lower() if isinstance(raw, str) else "" if raw is None else None
    if s in ("", "auto", "cpu", "cuda") or (s and s.startswith("cuda:") and s[5:].isdigit()):
        return s or "auto"
    raise SettingError("FFWD_DEVICE", raw, "auto, cpu, cuda or cuda:N")


KvCache = Literal["auto", "q8_0", "f16", "bf16"]
KV_CACHES: tuple[KvCache, ...] = ("auto", "q8_0", "f16", "bf16")

BackendKind = Literal["auto", "llamacpp", "transformers"]
BACKENDS: tuple[BackendKind, ...] = ("auto", "llamacpp", "transformers")
resolve_backend: Callable[[object], BackendKind] = choice("FFWD_BACKEND", BACKENDS)


_ENGINE_SETTINGS: dict[str, tuple[str, Parser]] = {
    "backend": ("FFWD_BACKEND", resolve_backend),
    "dtype": ("FFWD_DTYPE", resolve_dtype),
    "device": ("FFWD_DEVICE", resolve_device),
    "threads": ("FFWD_THREADS", int_in("FFWD_THREADS", 0, 1024)),
    "prefill_chunk": ("FFWD_PREFILL_CHUNK", int_in("FFWD_PREFILL_CHUNK", 1, 1 << 16)),
    "context": ("FFWD_CONTEXT", int_in("FFWD_CONTEXT", 0, 1 << 24)),
    "llamacpp_log": ("FFWD_LLAMACPP_LOG", flag("FFWD_LLAMACPP_LOG")),
    "kv_cache": ("FFWD_KV_CACHE", choice("FFWD_KV_CACHE", KV_CACHES)),
}


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the model is loaded and run (see the table above)."""

    backend: BackendKind = "auto"
    dtype: Dtype = "auto"
    device: str = "auto"
    threads: int = 0
    prefill_chunk: int = 512
    context: int = 0
    llamacpp_log: bool = False
    kv_cache: KvCache = "auto"


def resolve_engine_config(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
) -> EngineConfig:
    """Engine settings from the environment (or `env`), then non-None `overrides` on top."""
    env = os.environ if env is None else env
    return EngineConfig(**parse_settings("engine", _ENGINE_SETTINGS, env, overrides))


# --- scale-out settings (ffwd.deploy; CLI flags and Serve config args only) ---
#
#     --replicas N          model replicas (fixed, or the initial count when autoscaling)
#     --min-replicas N      autoscaling lower bound                            1
#     --max-replicas N      autoscaling upper bound (autoscaling is on when given)
#     --target-ongoing X    requests per replica the autoscaler aims at        2
#     --max-ongoing N       requests a replica holds (running + waiting)       2
#     --replica-cpus X      CPUs reserved per replica (also its torch threads) 1
#     --replica-gpus X      GPUs reserved per replica                          0
#     --router NAME         affine (prefix affinity) | pow2 (Ray's default)    affine
#     --route-imbalance N   extra requests the affine replica may hold         1

Router = Literal["affine", "pow2"]
ROUTERS: tuple[Router, ...] = ("affine", "pow2")


_SCALE_SETTINGS: dict[str, tuple[str, Parser]] = {
    "replicas": ("--replicas", int_in("--replicas", 1)),
    "min_replicas": ("--min-replicas", int_in("--min-replicas", 0)),
    "max_replicas": ("--max-replicas", int_in("--max-replicas", 1)),
    "target_ongoing": ("--target-ongoing", float_at_least("--target-ongoing", 0.1)),
    "max_ongoing": ("--max-ongoing", int_in("--max-ongoing", 1)),
    "replica_cpus": ("--replica-cpus", float_at_least("--replica-cpus", 0)),
    "replica_gpus": ("--replica-gpus", float_at_least("--replica-gpus", 0)),
    "router": ("--router", choice("--router", ROUTERS)),
    "imbalance": ("--route-imbalance", int_in("--route-imbalance", 0)),
}


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    """How many model replicas, what each reserves, and how requests reach them."""

    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int | None = None  # None: a fixed number of replicas
    target_ongoing: float = 2.0
    max_ongoing: int = 2
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    router: Router = "affine"
    imbalance: int = 1

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas is not None


def resolve_scale_config(overrides: Mapping[str, object] | None = None) -> ScaleConfig:
    """Scale-out settings from flags or a Serve config's args (None values ignored)."""
    values = parse_settings("scale", _SCALE_SETTINGS, {}, overrides)
    values.setdefault("replicas", max(1, values.get("min_replicas", 1)))
    cfg = ScaleConfig(**values)
    if cfg.max_replicas is not None:
        if cfg.min_replicas > cfg.max_replicas:
            raise ValueError(f"--min-replicas {cfg.min_replicas} exceeds "
                             f"--max-replicas {cfg.max_replicas}")
        if not cfg.min_replicas <= cfg.replicas <= cfg.max_replicas:
            raise ValueError(f"--replicas {cfg.replicas}: expected a start count within "
                             f"--min-replicas {cfg.min_replicas}..--max-replicas "
                             f"{cfg.max_replicas}")
    return cfg
