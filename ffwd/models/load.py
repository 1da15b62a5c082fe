"""Loading a model on its engine: `load_backend`, the engine choice, the engine check.

`load_backend` loads a `ModelRef` on the engine `choose_backend` picks. On
llama.cpp a GGUF file runs as it is, after `check_engine` made sure a first
forward runs on this machine (in a child process, once per library build, CPU,
model and settings): a native crash there is one clear line here, never a bare
signal. The forward cost curve comes from its cache (`ffwd.models.costs`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ffwd.config import cache_dir, resolve_backend
from ffwd.models.cache import read_cached, read_json, write_json
from ffwd.models.costs import cost_curve_path, llama_cost_parts, load_or_measure
from ffwd.models.files import DEFAULT_MODEL, ModelRef
from ffwd.models.resolve import resolve_model
from ffwd.models.weights import load_model, pick_device

if TYPE_CHECKING:
    from ffwd.engine.llama.native import LoadReport


log = logging.getLogger("ffwd.models")


class EngineFailure(ValueError):
    """The engine cannot run this model on this machine (a `ValueError`, so every command
    reports it in one line, as it reports a setting it cannot use)."""


def load_backend(
    spec: str | os.PathLike[str] | ModelRef = DEFAULT_MODEL,
    *,
    backend: str = "auto",
    dtype: str = "auto",
    device: str = "auto",
    prefill_chunk: int = 512,
    threads: int = 0,
    context: int = 0,
    llamacpp_log: bool = False,
    kv_cache: str = "auto",
    flash_attn: str = "auto",
    n_gpu_layers: str | int = "auto",
    deterministic: bool = False,
    parallel: int = 1,
    tie_margin: str | float = "auto",
    tokenizer: Any = None,
    measure_cost: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """The engine for `spec`: the first sequence of a `LlamaContext` of `parallel` (its
    `context`: the rest) or an `HFBackend` of one (`choose_backend`).

    On llama.cpp the GGUF file runs as it is (no float32 copy) and, when `tokenizer` is
    given, must share its vocabulary (`check_vocab`). Its cost surface (and on llama.cpp
    the attention path, `ffwd.engine.llama.attention`) comes from the cache unless
    `measure_cost` asks for a new measurement; `progress` hears what a measurement is
    doing. `deterministic` takes the exact path; `tie_margin`: `margin_for`.
    """
    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    dev = pick_device(device)
    if engine_for(ref, backend, dev) == "llamacpp":
        from ffwd.engine.llama.context import open_llama

        check_engine(ref, threads=threads, kv_cache=kv_cache, n_gpu_layers=n_gpu_layers,
                     deterministic=deterministic, flash_attn=flash_attn)
        engine: Any = open_llama(
            ref.path, n_ctx=context, threads=threads, n_batch=prefill_chunk, log=llamacpp_log,
            kv_cache=kv_cache, flash_attn=flash_attn, n_gpu_layers=n_gpu_layers,
            deterministic=deterministic, parallel=parallel)
        ctx: Any = engine.context  # a LlamaContext
        if tokenizer is not None:
            check_vocab(engine, tokenizer, ref.name)
        choose_attention(engine, cost_curve_path(ref, "llamacpp", llama_cost_parts(
            device=ctx.device_key, threads=ctx.threads, n_ctx=ctx.n_ctx,
            n_batch=engine.max_append, kv_cache=kv_cache, flash_attn=flash_attn,
            deterministic=deterministic)), measure_cost, progress)
        sampling_threads(1)  # the engine's thread samples between llama.cpp's forwards
    else:
        engine = _load_transformers(ref, dtype, dev, threads, prefill_chunk, measure_cost)
    engine.tie_margin = margin_for(engine, tie_margin, deterministic)
    return engine


def _load_transformers(ref: ModelRef, dtype: str, dev: Any, threads: int, prefill_chunk: int,
                       measure_cost: bool) -> Any:
    """An `HFBackend` of `ref` on `dev`, its cost surface cached or measured."""
    import torch

    from ffwd.engine.hf import HFBackend

    sampling_threads(threads)
    model = load_model(ref, dtype=dtype, device=dev)
    hf = HFBackend(model, prefill_chunk=prefill_chunk)
    hf.cost = load_or_measure(hf, cost_curve_path(ref, "transformers", (
        str(model.dtype).removeprefix("torch."), str(hf.device), torch.get_num_threads())),
        measure_cost)
    return hf


def margin_for(backend: Any, setting: str | float, deterministic: bool) -> float:
    """The tie margin `setting` gives `backend` (auto: its attention path's measured
    rounding, 0 where none was measured); 0 under `deterministic`."""
    table = backend.attention_table
    measured = table.paths[table.chosen].margin if table is not None else 0.0
    return 0.0 if deterministic else tie_margin_of(setting, measured)


# auto: this many times the most a path's rounding moved a near-tie in the load's sample
# (`ffwd.engine.cost.measure.measure_margin`), as a sample's largest is not the largest.
MARGIN_HEADROOM = 1.5


def tie_margin_of(setting: str | float, measured: float) -> float:
    """The margin `setting` (off, auto or logits) gives where the path measured `measured`.

    >>> tie_margin_of("off", 0.4), tie_margin_of("auto", 0.4), tie_margin_of(0.1, 0.4)
    (0.0, 0.6000000000000001, 0.1)
    """
    if setting == "off":
        return 0.0
    return MARGIN_HEADROOM * measured if setting == "auto" else float(setting)


def sampling_threads(threads: int) -> None:
    """torch's threads, set once a model is loaded: one beside llama.cpp, whose forwards
    run on the engine's thread (torch loads the same OpenMP runtime, and a parallel torch
    op there would start a second team on the cores ggml's team spins on; torch only
    samples), `threads` for transformers (0: torch's default)."""
    import torch

    from ffwd.engine.llama.threads import default_threads

    torch.set_num_threads(threads or default_threads())  # 0: torch's own, whatever ran before


def choose_attention(engine: Any, path: Path, refresh: bool,
                     progress: Callable[[str], None] | None) -> None:
    """Put `engine` on the attention path measured fastest here (cached at `path`), with
    that path's cost surface; a first measurement says what it does through `progress`."""
    from ffwd.engine.cost.measure import measure_paths
    from ffwd.engine.llama.attention import AttentionPath, Mix
    from ffwd.engine.llama.native import available_mib

    ctx = engine.context

    def run(backend: Any) -> Any:
        say = progress or (lambda text: log.info("measuring attention paths: %s", text))
        say(f"timing {len(ctx.paths)} attention path(s) on this machine, once "
            "(cached): " + ", ".join(p.name for p in ctx.paths))
        return measure_paths(backend, ctx.paths, Mix(), available_mib() / 2, say)

    table = load_or_measure(engine, path, refresh, run,
                            busy=lambda found, quiet, share: found.after_busy(quiet, share))
    chosen = AttentionPath.parse(table.chosen)
    if chosen != ctx.attention:
        ctx.use_attention(chosen)
    engine.cost = table.paths[table.chosen].surface
    engine.attention_table = table


def check_engine(ref: ModelRef, *, threads: int, kv_cache: str, n_gpu_layers: str | int,
                 deterministic: bool = False, flash_attn: str = "auto") -> LoadReport:
    """Make sure llama.cpp can run a first forward of `ref` here (`ffwd.engine.llama.probe`),
    and say where it put the weights and the cache; raise `EngineFailure` with what
    failed and what to do. A success is cached per library build, CPU, model and settings."""
    from ffwd.engine.llama.native import LoadReport, cpu_model, system_info
    from ffwd.engine.llama.probe import first_forward

    line = system_info()
    key = hashlib.sha256("\n".join(map(str, (
        line, cpu_model(), ref.cache_key, threads, kv_cache, n_gpu_layers, deterministic,
        flash_attn, "paths",  # every attention path the loader may time
    ))).encode()).hexdigest()
    mark = cache_dir() / "checks" / f"{key[:24]}.json"
    known = read_cached(mark, lambda p: LoadReport.from_dict(read_json(p)), "engine check")
    if known is not None:
        return known
    found = first_forward(str(ref.path), threads=threads, kv_cache=kv_cache,
                          n_gpu_layers=n_gpu_layers, deterministic=deterministic,
                          flash_attn=flash_attn)
    if isinstance(found, str):
        raise EngineFailure(
            f"{found}: llama.cpp cannot run {ref.name} on this machine ({cpu_model()}; build: "
            f"{line}). Rebuild the engine with `make install` (it leaves out ggml's AMX kernels, "
            "which crash), or run with FFWD_LLAMACPP_LOG=1 to read llama.cpp's own log")
    write_json(mark, found.as_dict(), "engine check")
    return found


def engine_for(ref: ModelRef, backend: str = "auto", device: str = "auto") -> str:
    """``llamacpp`` or ``transformers``: what `load_backend` runs `ref` on (`choose_backend`)."""
    requested, gguf = resolve_backend(backend), ref.gguf_file is not None
    offload = False
    if gguf and requested != "transformers":
        from ffwd.engine.llama.native import gpu_offload

        offload = gpu_offload()
    return choose_backend(requested, gguf=gguf, device=pick_device(device), gpu_offload=offload)


def choose_backend(
    requested: str, *, gguf: bool, device: str, gpu_offload: bool = False
) -> Literal["llamacpp", "transformers"]:
    """The engine that runs a model: `requested`, or for ``auto`` by file and device.

    `device` is the resolved one (cpu, cuda, cuda:N). llama.cpp runs GGUF files,
    on CUDA too when its build can offload (`gpu_offload`); transformers runs
    Hugging Face directories, and GGUF files on CUDA when llama.cpp cannot.

    >>> choose_backend("auto", gguf=True, device="cpu")
    'llamacpp'
    >>> choose_backend("auto", gguf=True, device="cuda")
    'transformers'
    >>> choose_backend("auto", gguf=True, device="cuda", gpu_offload=True)
    'llamacpp'
    >>> choose_backend("auto", gguf=False, device="cpu")
    'transformers'
    """
    on_cuda = device.startswith("cuda")
    if requested == "llamacpp":
        if not gguf:
            raise ValueError(
                "FFWD_BACKEND=llamacpp runs .gguf files; this model is a Hugging Face "
                "directory (use --backend transformers or auto)"
            )
        if on_cuda and not gpu_offload:
            raise ValueError(
                f"FFWD_BACKEND=llamacpp: this llama.cpp build runs on the CPU only, not "
                f"{device}: rebuild it with `make install LLAMA=cuda`, or use --device cpu, "
                "or --backend transformers"
            )
        return "llamacpp"
    if requested == "transformers":
        return "transformers"
    return "llamacpp" if gguf and (gpu_offload or not on_cuda) else "transformers"


def check_vocab(backend: Any, tokenizer: Any, name: str) -> None:
    """Raise unless `tokenizer` and llama.cpp's vocabulary agree on size and end ids.

    The tokenizer renders and reads every id the engine sees, so both must be
    the same vocabulary; every id the tokenizer ends a turn with must be one
    llama.cpp ends generation at, spelled the same.
    """
    from ffwd.templates.rows import default_eos_ids

    n = len(tokenizer)
    if n != backend.vocab_size:
        raise ValueError(
            f"{name}: the tokenizer has {n} ids but llama.cpp's vocabulary has "
            f"{backend.vocab_size}: they are not the same vocabulary"
        )
    for i in sorted(set(default_eos_ids(tokenizer)) | backend.eos_ids):
        ours, theirs = tokenizer.convert_ids_to_tokens(i), backend.context.token_text(i)
        if ours != theirs:
            raise ValueError(
                f"{name}: id {i} is {ours!r} to the tokenizer but {theirs!r} to llama.cpp"
            )
        if i not in backend.eos_ids:
            raise ValueError(
                f"{name}: the tokenizer ends turns with id {i} ({ours!r}), which llama.cpp "
                f"does not treat as an end of generation (its ids: {sorted(backend.eos_ids)})"
            )
