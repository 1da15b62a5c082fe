"""Engine settings: how the model is loaded and run (FFWD_BACKEND ... FFWD_KV_CACHE)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Literal

from ffwd.values import Parser, SettingError, choice, flag, int_in, parse_settings

#     FFWD_BACKEND        auto|llamacpp|transformers (models.choose_backend)  auto
#     FFWD_DTYPE          auto|float32|bfloat16|float16 (transformers)       auto
#     FFWD_DEVICE         auto|cpu|cuda|cuda:N                               auto
#     FFWD_THREADS        compute threads, 0 = torch's default               0
#     FFWD_PREFILL_CHUNK  prompt ids per prefill forward, >= 1               512
#     FFWD_CONTEXT        llama.cpp context ids, 0 = the model's (<= 8192)   0
#     FFWD_LLAMACPP_LOG   1 = llama.cpp's own log lines on stderr            0
#     FFWD_KV_CACHE       llama.cpp's cache: auto|q8_0|f16|bf16              auto
#     FFWD_FLASH_ATTN     llama.cpp's flash attention: auto|on|off           auto
#                         (auto, and a cache of auto: every path is timed at the
#                         first load and the fastest for agent turns is kept)
#     FFWD_N_GPU_LAYERS   llama.cpp: layers on the GPU, auto|all|N           auto
#                         (auto: all where the build can offload, else none)
#     FFWD_DETERMINISTIC  1 = greedy output bit-identical however forwards   0
#                         are cut: fill on/off, cold/warm cache, stream/whole,
#                         alone or beside other requests
#     FFWD_PARALLEL       llama.cpp: sequences decoded together, >= 1          4
#                         (each its own KV cache of FFWD_CONTEXT ids; one
#                         forward per step carries every running sequence's ids)
#     FFWD_TIE_MARGIN     greedy verify keeps a draft id whose logit is within   auto
#                         this of the best: off, auto (the attention path's own
#                         measured rounding, 0 on an exact path) or logits;
#                         never under FFWD_DETERMINISTIC
#
# Flash attention and the KV cache's type decide which attention kernel llama.cpp
# runs (ffwd.engine.llama.attention): their speed depends on the machine and the depth, so
# with both on auto the first load times each path and keeps the fastest. With
# flash attention on an f16 cache a one-id forward splits its attention over the
# threads (past 256 ids) and a batch of 64 or more takes a tiled kernel, so greedy
# output can flip at near-ties with fill and the prompt cache. FFWD_DETERMINISTIC
# keeps to flash attention on a q8_0 cache (bf16 where the heads do not fit its
# blocks, and bf16 is timed beside it), which keeps every forward on the per-row
# kernel (ffwd.bench.agreement), the transformers engine float32 on the CPU, and
# llama.cpp on the CPU: it costs prefill time (README's performance section).
#
# FFWD_TIE_MARGIN: on a path that is not exact, a verify forward and one-id forwards round
# the logits apart, so at a near-tie a repeated greedy request can leave the reply it wrote
# before and recall's copy of it fails from there on. A draft id within the path's own
# rounding of the best logit is a tie the kernels cannot break either way; with a margin
# the draft is kept (docs/ngram-mod.md has the measurement). It changes greedy output at
# such ties only, and is 0 on an exact path and under FFWD_DETERMINISTIC.
#
# FFWD_PARALLEL: requests run side by side in one llama.cpp context (ffwd.engine.core.batch).
# The default is what measured best on two CPU cores with the embedded model (README's
# --parallel table): 4 sequences, as llama-server's own default for --parallel auto.
# The transformers engine runs one sequence whatever the setting.
DEFAULT_PARALLEL = 4

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


FlashAttn = Literal["auto", "on", "off"]
FLASH_ATTNS: tuple[FlashAttn, ...] = ("auto", "on", "off")
KvCache = Literal["auto", "q8_0", "f16", "bf16"]
KV_CACHES: tuple[KvCache, ...] = ("auto", "q8_0", "f16", "bf16")

BackendKind = Literal["auto", "llamacpp", "transformers"]
BACKENDS: tuple[BackendKind, ...] = ("auto", "llamacpp", "transformers")
resolve_backend: Callable[[object], BackendKind] = choice("FFWD_BACKEND", BACKENDS)


TieMargin = str | float  # "off", "auto" or logits


def resolve_tie_margin(raw: object) -> TieMargin:
    """off (or 0), auto or a number of logits >= 0; raise naming FFWD_TIE_MARGIN otherwise.

    >>> [resolve_tie_margin(v) for v in (None, "auto", "0", "0.25", 0.5)]
    ['off', 'auto', 'off', 0.25, 0.5]
    """
    s = raw.strip().lower() if isinstance(raw, str) else raw
    if s in (None, "", "off", "auto"):
        return s or "off"
    try:
        value = float(s) if isinstance(s, (str, int, float)) and not isinstance(s, bool) else -1
    except ValueError:
        value = -1.0
    if not 0 <= value < 100:
        raise SettingError("FFWD_TIE_MARGIN", raw, "off, auto or logits from 0 to 100")
    return value or "off"


def resolve_gpu_layers(raw: object) -> str | int:
    """auto, all (or -1) or a count of layers; raise naming FFWD_N_GPU_LAYERS otherwise."""
    s = raw.strip().lower() if isinstance(raw, str) else raw
    if s in (None, "", "auto"):
        return "auto"
    if s in ("all", "-1", -1):
        return "all"
    try:
        return int_in("FFWD_N_GPU_LAYERS", 0, 100_000)(raw)
    except SettingError:
        raise SettingError("FFWD_N_GPU_LAYERS", raw, "auto, all or a number of layers") from None


# OpenMP threads (llama.cpp's and torch's; ggml's barriers are OpenMP's) spin this many
# rounds at a barrier before they sleep. libgomp's default, 300000, starves other processes
# on shared cores (ffwd.engine.llama.threads); 1000 slept at barriers inside every forward, which
# cost 0.83x of llama-server's decode 2k ids deep. README's "On a shared machine" has the
# table this was chosen from.
OPENMP_SPIN = "10000"
# Set beside GOMP_SPINCOUNT when ffwd set it, so that what ffwd chose is told apart from
# what the operator chose, in this process and in its children.
OPENMP_MARK = "FFWD_SET_GOMP_SPINCOUNT"
PEER = "FFWD_PEER"  # "1" in a peer's environment (the bench's llama-server): no defaults


def openmp_defaults(env: MutableMapping[str, str] | None = None) -> None:
    """Give OpenMP a short spin unless the operator set GOMP_SPINCOUNT or OMP_WAIT_POLICY
    (or this is a peer's process). Only a library loaded after this reads it: the
    command line (`ffwd.cli.main`) calls it first thing.

    >>> env = {}; openmp_defaults(env); env["GOMP_SPINCOUNT"]
    '10000'
    >>> env = {"GOMP_SPINCOUNT": "300000"}; openmp_defaults(env); env
    {'GOMP_SPINCOUNT': '300000'}
    """
    env = os.environ if env is None else env
    if "GOMP_SPINCOUNT" not in env and "OMP_WAIT_POLICY" not in env and env.get(PEER) != "1":
        env["GOMP_SPINCOUNT"] = env[OPENMP_MARK] = OPENMP_SPIN


def peer_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a peer (llama-server in `ffwd bench`) runs in: the operator's, without
    the OpenMP spin ffwd set for itself, so that the peer runs at its own default.

    >>> env = {"PATH": "/bin"}; openmp_defaults(env); peer_environment(env)
    {'PATH': '/bin', 'FFWD_PEER': '1'}
    >>> peer_environment({"GOMP_SPINCOUNT": "5000"})["GOMP_SPINCOUNT"]
    '5000'
    """
    out = dict(os.environ if env is None else env)
    if OPENMP_MARK in out and out.get("GOMP_SPINCOUNT") == out[OPENMP_MARK]:
        del out["GOMP_SPINCOUNT"]
    out.pop(OPENMP_MARK, None)
    out[PEER] = "1"
    return out


_ENGINE_SETTINGS: dict[str, tuple[str, Parser]] = {
    "backend": ("FFWD_BACKEND", resolve_backend),
    "dtype": ("FFWD_DTYPE", resolve_dtype),
    "device": ("FFWD_DEVICE", resolve_device),
    "threads": ("FFWD_THREADS", int_in("FFWD_THREADS", 0, 1024)),
    "prefill_chunk": ("FFWD_PREFILL_CHUNK", int_in("FFWD_PREFILL_CHUNK", 1, 1 << 16)),
    "context": ("FFWD_CONTEXT", int_in("FFWD_CONTEXT", 0, 1 << 24)),
    "llamacpp_log": ("FFWD_LLAMACPP_LOG", flag("FFWD_LLAMACPP_LOG")),
    "kv_cache": ("FFWD_KV_CACHE", choice("FFWD_KV_CACHE", KV_CACHES)),
    "flash_attn": ("FFWD_FLASH_ATTN", choice("FFWD_FLASH_ATTN", FLASH_ATTNS,
                                             {"1": "on", "0": "off", "true": "on",
                                              "false": "off"})),
    "n_gpu_layers": ("FFWD_N_GPU_LAYERS", resolve_gpu_layers),
    "deterministic": ("FFWD_DETERMINISTIC", flag("FFWD_DETERMINISTIC")),
    "parallel": ("FFWD_PARALLEL", int_in("FFWD_PARALLEL", 1, 256)),
    "tie_margin": ("FFWD_TIE_MARGIN", resolve_tie_margin),
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
    flash_attn: FlashAttn = "auto"
    n_gpu_layers: str | int = "auto"
    deterministic: bool = False
    parallel: int = DEFAULT_PARALLEL
    tie_margin: TieMargin = "auto"


def resolve_engine_config(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
) -> EngineConfig:
    """Engine settings from the environment (or `env`), then non-None `overrides` on top."""
    env = os.environ if env is None else env
    engine = EngineConfig(**parse_settings("engine", _ENGINE_SETTINGS, env, overrides))
    return exact(engine) if engine.deterministic else engine


def exact(engine: EngineConfig) -> EngineConfig:
    """`engine` under FFWD_DETERMINISTIC: float32 where the dtype was auto, no GPU layers;
    a setting that cannot be exact is an error naming it. (The KV cache's type is the
    llama.cpp build's question: every type is exact with the shape-invariant kernel, only
    q8_0 and bf16 without it; `LlamaCppBackend` refuses f16 there.)"""
    why = "FFWD_DETERMINISTIC needs"
    if engine.flash_attn == "off":
        raise SettingError("FFWD_FLASH_ATTN", "off", "auto or on",
                           f"{why} flash attention (FFWD_FLASH_ATTN=auto or on, not off): "
                           "its kernel is what is exact, the plain path's matrix products "
                           "round batched and one-id forwards apart")
    if engine.dtype in ("bfloat16", "float16"):
        raise SettingError("FFWD_DTYPE", engine.dtype, "auto or float32",
                           f"{why} float32 weights (auto), not {engine.dtype}")
    if engine.tie_margin not in ("off", "auto"):
        raise SettingError("FFWD_TIE_MARGIN", engine.tie_margin, "off or auto",
                           f"{why} every draft id checked exactly: a tie margin keeps ids "
                           "that are not the argmax")
    if engine.device.startswith("cuda") or engine.n_gpu_layers not in ("auto", 0):
        raise SettingError("FFWD_DEVICE", engine.device, "cpu",
                           f"{why} the CPU: GPU kernels are chosen by batch shape (FFWD_DEVICE="
                           f"{engine.device}, FFWD_N_GPU_LAYERS={engine.n_gpu_layers})")
    return replace(engine, dtype="float32", device="cpu", n_gpu_layers=0, tie_margin="off")
