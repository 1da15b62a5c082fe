"""A llama.cpp context on an attention path: the KV cache's type, flash attention, memory.

`exact_kv(lib, model)` is the cache type that keeps every forward on ggml's
per-row attention kernel (`--deterministic`): q8_0 where the model's key and
value heads fit its 32-value blocks, else bf16. `new_context` opens a
context of `n_seq` sequences on an `AttentionPath` and returns it with the MiB
llama.cpp reserved for its KV cache and compute buffers (read from its own
log: the plain path's compute buffer grows with context x micro-batch x
heads, which is what can rule it out).

Each sequence has a KV stream of its own (``kv_unified = false``) of `n_ctx`
cells: attention reads only its own stream, and where its cells sit depends
on its own history alone, so on the exact paths a sequence's logits do not
depend on what the others hold or forward beside it (tests/integration).
llama.cpp then splits a forward into micro-batches that carry the same number
of ids from each of a run of consecutive sequences (`ffwd.engine.core.batch`).
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any

from ffwd.engine.llama.attention import AttentionPath
from ffwd.engine.llama.native import capture, init_llama

KV_TYPES = {"f16": 1, "q8_0": 8, "bf16": 30}  # ggml's type ids for the KV cache
Q8_BLOCK = 32  # q8_0 packs 32 values: a head's size must be a multiple
_RESERVED = re.compile(r"(?:KV|compute) buffer size\s*=\s*([\d.]+) MiB")


def reserved_mib(lines: list[str]) -> float:
    """MiB of KV cache and compute buffers in llama.cpp's log of a new context.

    >>> reserved_mib(["llama_kv_cache: CPU KV buffer size =   180.00 MiB",
    ...               "sched_reserve: CPU compute buffer size =    98.25 MiB"])
    278.25
    """
    return sum(float(m[1]) for line in lines if (m := _RESERVED.search(line)))


def exact_kv(lib: Any, model: Any) -> str:
    """q8_0 where the model's key and value heads fit its blocks, else bf16."""
    heads = [_head_size(lib, model, key) for key in ("key_length", "value_length")]
    return "q8_0" if all(h % Q8_BLOCK == 0 for h in heads) else "bf16"


def exact_kv_of(path: str | os.PathLike[str]) -> str:
    """`exact_kv` for the GGUF file at `path`, read from its metadata (no weights loaded)."""
    lib = init_llama()
    params = lib.llama_model_default_params()
    params.vocab_only = True
    model = lib.llama_model_load_from_file(os.fspath(path).encode(), params)
    if not model:
        raise ValueError(f"{path}: llama.cpp cannot read this file as a GGUF model")
    try:
        return exact_kv(lib, model)
    finally:
        lib.llama_model_free(model)


def _head_size(lib: Any, model: Any, key: str) -> int:
    """A head's size from the file's metadata (loaded even without the weights)."""
    arch = _meta(lib, model, "general.architecture")
    size = _meta(lib, model, f"{arch}.attention.{key}")
    try:
        return int(size) if size else int(_meta(lib, model, f"{arch}.embedding_length")) // max(
            1, int(_meta(lib, model, f"{arch}.attention.head_count") or 1))
    except ValueError:  # per-layer head counts: ask the loaded model
        return int(lib.llama_model_n_embd(model)) // max(1, int(lib.llama_model_n_head(model)))


def _meta(lib: Any, model: Any, key: str) -> str:
    value = ctypes.create_string_buffer(128)
    if lib.llama_model_meta_val_str(model, key.encode(), value, 128) > 0:
        return value.value.decode()
    return ""


def new_context(lib: Any, model: Any, *, n_ctx: int, n_batch: int, threads: int,
                path: AttentionPath, n_seq: int = 1) -> tuple[Any, list[str]]:
    """A context of `n_seq` sequences of `n_ctx` ids each on `path`, and llama.cpp's log of
    making it (`reserved_mib` reads it); raise `RuntimeError` when llama.cpp cannot
    (memory, an unsupported path)."""
    params = lib.llama_context_default_params()
    params.n_ctx = n_ctx * n_seq
    params.n_batch = params.n_ubatch = n_batch
    params.n_seq_max = n_seq
    params.kv_unified = False  # a stream per sequence: its own cells, its own order
    params.n_threads = params.n_threads_batch = threads
    # A full-size sliding-window cache keeps ids that slid out, for rewinds (llamacpp.py).
    params.swa_full = True
    params.flash_attn_type = 1 if path.flash else 0
    params.type_k = params.type_v = KV_TYPES[path.kv]
    params.no_perf = True
    with capture() as lines:
        ctx = lib.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError(f"llama.cpp could not create a context of {n_seq} x {n_ctx} ids on "
                           f"the {path.name} attention path (FFWD_LLAMACPP_LOG=1 shows why)")
    return ctx, lines
