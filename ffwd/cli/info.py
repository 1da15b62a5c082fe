"""`ffwd info`: what a model will run as, without loading its weights.

Prints the resolved model file, the backend, device, dtype and threads the
settings resolve to, the chat template and tool-call format the server
would use, the context window, the forward cost curve fill sizes its spans by (once a
load has measured it), the fill settings ``ffwd serve`` would start with,
and what greedy determinism that configuration promises (see
`greedy_promise`). On llama.cpp it also prints the CPU, the library's build
line, whether it can offload to a GPU, and where a first forward (run in a
child process, `ffwd.models.check_engine`) put the weights (CPU, REPACK, AMX,
GPU buffers) and the KV cache; when that forward fails, it says so.
``--json`` prints the same as one JSON object.
``--measure-cost`` loads the model to measure the cost curve again (do it on
a quiet machine: a curve measured under contention misprices spans).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata
from typing import Any

from ffwd.cli.args import add_model_arguments, read_template, resolve_ref, template_arguments
from ffwd.config import SERVER_DEFAULT_FILL, resolve_engine_config, resolve_fill_config
from ffwd.engine.promise import greedy_promise


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    p.add_argument("--backend", default=None, help="auto|llamacpp|transformers (FFWD_BACKEND)")
    p.add_argument("--dtype", default=None, help="auto|float32|bfloat16|float16 (FFWD_DTYPE)")
    p.add_argument("--device", default=None, help="auto|cpu|cuda|cuda:N (FFWD_DEVICE)")
    p.add_argument("--threads", default=None, help="torch threads, 0 = default (FFWD_THREADS)")
    p.add_argument("--kv-cache", default=None, help="llama.cpp: auto|q8_0|f16|bf16 (FFWD_KV_CACHE)")
    p.add_argument("--flash-attn", default=None, help="llama.cpp: auto|on|off (FFWD_FLASH_ATTN)")
    p.add_argument("--context", default=None, help="llama.cpp context ids (FFWD_CONTEXT)")
    p.add_argument("--deterministic", action="store_const", const=True, default=None,
                   help="the exact path: bit-identical greedy output (FFWD_DETERMINISTIC)")
    p.add_argument("--n-gpu-layers", default=None,
                   help="llama.cpp: layers on the GPU, auto|all|N (FFWD_N_GPU_LAYERS)")
    p.add_argument("--tie-margin", default=None,
                   help="greedy verify's tie margin: off|auto|logits (FFWD_TIE_MARGIN)")
    template_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--measure-cost", action="store_true",
                   help="load the model and measure its forward cost curve again (seconds)")


def describe(args: argparse.Namespace) -> dict[str, Any]:
    """Everything `ffwd info` reports, resolved from the arguments and the environment."""
    from ffwd.models import engine_for, load_tokenizer, pick_device
    from ffwd.templates.choose import model_template, resolve_template

    engine = resolve_engine_config(overrides={
        "backend": args.backend, "dtype": args.dtype, "device": args.device,
        "threads": args.threads, "kv_cache": args.kv_cache, "n_gpu_layers": args.n_gpu_layers,
        "flash_attn": args.flash_attn, "context": args.context,
        "deterministic": args.deterministic, "tie_margin": args.tie_margin})
    fill = resolve_fill_config(default_mode=SERVER_DEFAULT_FILL)
    ref = resolve_ref(args)
    device = pick_device(engine.device)
    backend = engine_for(ref, engine.backend, device)
    window = _context_window(ref, backend, engine.context)
    tokenizer = load_tokenizer(ref)
    resolved = resolve_template(tokenizer, args.tool_format, read_template(args))
    if args.measure_cost:
        from ffwd.models import load_backend

        load_backend(ref, backend=backend, dtype=engine.dtype, device=device,
                     threads=engine.threads, context=engine.context, kv_cache=engine.kv_cache,
                     flash_attn=engine.flash_attn, n_gpu_layers=engine.n_gpu_layers,
                     prefill_chunk=engine.prefill_chunk, deterministic=engine.deterministic,
                     tokenizer=tokenizer, measure_cost=True,
                     progress=lambda text: print(f"measuring: {text}", file=sys.stderr))
    costs = _costs(ref, backend, engine, device, window)
    promised, promise = greedy_promise(backend, _runs_on(backend, engine, device),
                                       costs["dtype"], _thread_count(engine.threads))
    return {
        "ffwd": metadata.version("ffwd"),
        "python": platform.python_version(),
        "model": ref.name,
        "path": str(ref.path),
        "size": f"{ref.path.stat().st_size / 2**20:.1f} MiB" if ref.path.is_file() else None,
        "backend": backend,
        "device": device,
        "dtype": _dtype_text(backend, engine, costs["dtype"]),
        "threads": _threads(engine.threads),
        "template": "the model's own" if resolved.template == model_template(tokenizer)
        else args.chat_template or f"builtin {resolved.format_name}",
        "tool_format": resolved.format_name,
        "tool_calls": resolved.note,
        "context_window": window,
        "vocab_size": len(tokenizer),
        "attention": costs["attention"],
        "cost_surface": costs["surface"],
        "fill_served": fill.mode,
        "fill_trace": fill.trace_path or ("checks only" if fill.trace else "off"),
        "greedy_deterministic": promised,
        "greedy_determinism": promise,
        "tie_margin": _tie_margin(engine.tie_margin, costs.get("margin")),
        "parallel": _parallel(backend, engine, window, promised),
        **(_native(ref, engine) if backend == "llamacpp" else {"cpu": _cpu()}),
    }


def _parallel(backend: str, engine: Any, window: int, exact: bool) -> str:
    """How many requests decode together (`ffwd.engine.core.batch`), and whether a
    request's greedy ids stay the same beside others (where the path is `exact`)."""
    if backend != "llamacpp":
        return "1: the transformers engine runs one request at a time"
    beside = ("the same alone or beside others" if exact else
              "not promised the same alone and beside others (see greedy determinism)")
    return (f"{engine.parallel} requests decode together (FFWD_PARALLEL), each with a KV "
            f"cache of {window} ids, one forward per step; a request's greedy ids are {beside}")


def _runs_on(backend: str, engine: Any, device: str) -> str:
    """Where the forwards run: on llama.cpp the CPU unless layers go to a GPU."""
    if backend != "llamacpp":
        return device
    from ffwd.engine.llama.native import gpu_layers, gpu_offload, system_info

    layers = gpu_layers(engine.n_gpu_layers, offload=gpu_offload(), line=system_info())
    return "cpu" if engine.deterministic or layers == 0 else "gpu"


def _cpu() -> str:
    from ffwd.engine.llama.native import cpu_model

    return cpu_model()


def _native(ref: Any, engine: Any) -> dict[str, Any]:
    """llama.cpp's build, its GPU offload, and where a first forward put the model."""
    from ffwd.engine.llama.native import amx_kernels, gpu_layers, gpu_offload, system_info
    from ffwd.models import EngineFailure, check_engine

    line, offload = system_info(), gpu_offload()
    out: dict[str, Any] = {
        "cpu": _cpu(), "llama_cpp_build": line,
        "gpu_offload": "available in this build" if offload else "none (a CPU-only build: "
        "`make install LLAMA=cuda|metal|vulkan` builds one)",
        "gpu_layers": gpu_layers(engine.n_gpu_layers, offload=offload, line=line),
        "amx_guard": "on: the build has ggml's AMX kernels, which crash; weights stay in plain "
        "CPU buffers (no AMX, no REPACK)" if amx_kernels(line) else "off (no AMX kernels)",
    }
    try:
        load = check_engine(ref, threads=engine.threads, kv_cache=engine.kv_cache,
                            n_gpu_layers=engine.n_gpu_layers, deterministic=engine.deterministic)
        out["engine_check"] = "ok: a first forward ran"
        out["layout"] = load.describe()
    except EngineFailure as exc:
        out["engine_check"] = f"FAILED: {exc}"
    return out


def _dtype_text(backend: str, engine: Any, dtype: str) -> str:
    if backend == "llamacpp":
        kv = dtype.removeprefix("gguf-kv-").removesuffix("-noflash")
        return f"the GGUF file's own, KV cache {kv or 'chosen at the first load'}"
    return f"{dtype} ({engine.dtype})" if engine.dtype == "auto" else dtype


def _thread_count(requested: int) -> int:
    from ffwd.engine.llama.threads import default_threads

    return requested or default_threads()


def _threads(requested: int) -> str:
    return str(requested) if requested else f"{_thread_count(0)} (torch default)"


def _context_window(ref: Any, backend: str, context: int) -> int:
    """Prompt plus output tokens the server allows per request (llama.cpp: what it allocates);
    a GGUF's trained context from its header, a HF directory's from its config."""
    from ffwd.engine.hf import DEFAULT_CONTEXT_WINDOW
    from ffwd.engine.llama.context import DEFAULT_CONTEXT_CAP
    from ffwd.models import gguf_meta

    if ref.gguf_file:
        trained = gguf_meta(ref.path).context_length or DEFAULT_CONTEXT_WINDOW
    else:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(ref.directory)
        trained = int(getattr(cfg, "max_position_embeddings", 0) or DEFAULT_CONTEXT_WINDOW)
    if backend == "llamacpp":
        return context or min(trained, DEFAULT_CONTEXT_CAP)
    return trained


def _costs(ref: Any, backend: str, engine: Any, device: str, window: int) -> dict[str, Any]:
    """The measured costs a load found or will make: on llama.cpp the attention table and
    the chosen path's surface (and the KV cache it names), elsewhere the surface."""
    from ffwd.models import cost_curve_path, llama_cost_parts, read_cost_curve, torch_dtype

    threads = _thread_count(engine.threads)
    if backend == "llamacpp":
        from ffwd.engine.llama.native import device_key, gpu_layers, gpu_offload, system_info

        where = device_key(gpu_layers(engine.n_gpu_layers, offload=gpu_offload(),
                                      line=system_info()))
        path = cost_curve_path(ref, "llamacpp", llama_cost_parts(
            device=where, threads=threads, n_ctx=window, n_batch=engine.prefill_chunk,
            kv_cache=engine.kv_cache, flash_attn=engine.flash_attn,
            deterministic=engine.deterministic))
        table = read_cost_curve(path)
        if table is None:
            from ffwd.engine.llama.attention import candidates
            from ffwd.engine.llama.kv import exact_kv_of
            from ffwd.engine.llama.native import shape_invariant

            exact = exact_kv_of(ref.path) if engine.deterministic else None
            paths = candidates(engine.flash_attn, engine.kv_cache, exact,
                               shape_invariant(system_info()))
            later = ("not measured yet: the first load times "
                     f"{', '.join(p.name for p in paths)} into {path}")
            known = len(paths) == 1 or engine.deterministic  # every exact path is exact
            return {"dtype": _llama_dtype(paths[0].name) if known else "gguf-kv-",
                    "attention": later, "surface": later}
        chosen = table.paths[table.chosen].surface
        return {"dtype": _llama_dtype(table.chosen), "attention": table.describe(window),
                "surface": f"{chosen.describe()} ({path})",
                "margin": table.paths[table.chosen].margin}
    dtype = str(torch_dtype(engine.dtype, device)).removeprefix("torch.")
    dev = device if device == "cpu" or ":" in device else f"{device}:0"
    path = cost_curve_path(ref, "transformers", (dtype, dev, threads))
    surface = read_cost_curve(path)
    found = f"{surface.describe()} ({path})" if surface is not None else \
        f"not measured yet: the first load measures it into {path}"
    return {"dtype": dtype, "attention": None, "surface": found}


def _tie_margin(setting: str | float, measured: float | None) -> str:
    """What FFWD_TIE_MARGIN changes here (`measured`: the chosen path's rounding, None
    before the first load measured it).

    >>> _tie_margin("off", 0.4)[:3], _tie_margin("auto", None)[:4], _tie_margin(0.2, 0.0)[:4]
    ('off', 'auto', '0.20')
    """
    from ffwd.models.load import tie_margin_of

    if setting == "off":
        return ("off: a greedy verify keeps a draft id only where it is the argmax "
                "(FFWD_TIE_MARGIN=auto keeps ties within the attention path's rounding)")
    what = ("a greedy verify also keeps a draft id whose logit is within {} logits of the "
            "best: on this path a verify and one-id forwards round that far apart, so a "
            "repeated request follows its earlier reply; greedy output may differ from plain "
            "decoding at such ties (never under --deterministic)")
    if measured is None and setting == "auto":
        return "auto: " + what.format("the path's measured rounding (measured at first load)")
    margin = tie_margin_of(setting, measured or 0.0)
    if margin == 0.0:
        return f"{setting}: 0 here (the chosen path rounded every forward alike)"
    return f"{margin:.2f} ({setting}): " + what.format(f"{margin:.2f}")


def _llama_dtype(path: str) -> str:
    """`LlamaSequence.dtype_name` for an attention path's name."""
    flash, _, kv = path.partition("/")
    return f"gguf-kv-{kv}" + ("" if flash == "flash" else "-noflash")


def main(args: argparse.Namespace) -> int:
    try:
        info = describe(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"ffwd info: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(info, ensure_ascii=False))
        return 0
    width = max(map(len, info))
    for key, value in info.items():
        if isinstance(value, list):  # a table: one line each, under its name
            value = "\n".join(value)
        print(f"{key.replace('_', ' '):<{width}}  {'-' if value is None else value}")
    return 0
