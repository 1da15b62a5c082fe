"""What greedy determinism a configuration promises: the same greedy request gives the
same answer with fill on or off and with a cold or a warm prompt cache exactly where a
forward's rows do not depend on how many ids it carries.

`greedy_promise(engine, device, dtype, threads)` answers for a configuration
(`ffwd info`, before any weights load); `loaded_promise(backend)` for a loaded
backend (the server's start-up banner).
"""

from __future__ import annotations

from ffwd.engine.backend import Backend

# Measured with `python -m ffwd.bench.agreement --threads 2 --kv-cache f16 --flash-attn
# off,on --prompts 4 --tokens 1500` (and `--model gemma3 --tokens 640`) on two Xeon cores;
# the plain path is what the attention measurement chose there.
AGREEMENT = {
    "noflash": ("on the embedded model, 32 argmax flips in 6,000 ids decoded one at a time "
                "against 16-id forwards (29 of them while the cache held under 256 ids) and 0 "
                "in 24 cold against warm prefills; on Gemma 3 270M 4 in 2,560"),
    "flash": ("on the embedded model, 4 argmax flips in 6,000 ids decoded one at a time "
              "against 16-id forwards and 0 in 24 cold against warm prefills"),
}


def greedy_promise(engine: str, device: str, dtype: str, threads: int = 0) -> tuple[bool, str]:
    """Whether greedy output is independent of how ids are batched into forwards, and why.
    For llama.cpp, `dtype` names the KV cache and the attention path (``gguf-kv-q8_0``,
    ``gguf-kv-f16-noflash``: `LlamaCppBackend.dtype_name`).

    >>> greedy_promise("transformers", "cpu", "float32")[0]
    True
    >>> greedy_promise("transformers", "cpu", "bfloat16")[1][:3]
    'no:'
    >>> greedy_promise("llamacpp", "cpu", "gguf-kv-q8_0", 2)[0]
    True
    """
    if engine in ("llamacpp", "llama.cpp"):
        if dtype in ("gguf-kv-q8_0", "gguf-kv-bf16"):
            return True, ("yes (--deterministic): with a q8_0 (or bf16) KV cache every "
                          "llama.cpp forward takes the same attention kernel, so greedy output "
                          "is the same with fill on or off and with a cold or a warm prompt "
                          "cache, on any number of threads, for the embedded model's Q4_1 "
                          "weights (other weight types may round batched matmuls differently: "
                          "python -m ffwd.bench.agreement measures a model)")
        plain = dtype.endswith("-noflash")
        path = "plain attention" if plain else "flash attention"
        return False, (f"no, not bit for bit: on this attention path ({path}, "
                       f"{dtype.removeprefix('gguf-')}) llama.cpp rounds batched and one-id "
                       "forwards apart, so at near-ties greedy output can flip with fill on or "
                       f"off and with the prompt cache's state: "
                       f"{AGREEMENT['noflash' if plain else 'flash']}. --deterministic "
                       "(FFWD_DETERMINISTIC=1) makes it bit-identical, at a slower prefill")
    if engine == "transformers" and device == "cpu" and dtype == "float32":
        return True, ("yes: float32 on CPU; greedy output is the same with fill on or off and "
                      "with a cold or a warm prompt cache")
    why = ("reduced precision rounds differently for different batch shapes"
           if dtype != "float32" else "GPU kernels are chosen by batch shape")
    return False, (f"no: {why}, so greedy output can change with fill on/off and with the "
                   "prompt-cache state (use --dtype float32 on CPU for identical output)")


def loaded_promise(backend: Backend) -> tuple[bool, str]:
    """`greedy_promise` for a loaded backend (what `ffwd serve` prints at start)."""
    return greedy_promise(backend.engine, backend.device.type, backend.dtype_name,
                          backend.threads)
