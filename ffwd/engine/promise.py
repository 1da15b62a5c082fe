"""What greedy determinism a configuration promises: the same greedy request gives the
same answer with fill on or off, with a cold or a warm prompt cache and alone or beside
other requests exactly where a forward's rows do not depend on how many ids it carries.

`greedy_promise(engine, device, dtype, threads, invariant)` answers for a configuration
(`ffwd info`, before any weights load); `loaded_promise(backend)` for a loaded backend
(the server's start-up banner, ``/v1/models``).

On llama.cpp that is a question of the attention path (`AttentionPath.exact`): on the
CPU, flash attention with the shape-invariant kernel of ``patches/llama.cpp`` on any KV
cache (`invariant`; ``make install`` builds it), or without it on a q8_0 or bf16 cache.
On a GPU nothing is promised: the patch leaves the GPU kernels as they are, and those
choose their kernels by batch shape.
"""

from __future__ import annotations

from ffwd.engine.backend import Backend
from ffwd.engine.llama.attention import AttentionPath

# Measured with `python -m ffwd.bench.agreement --threads 2 --kv-cache f16 --flash-attn
# off,on --prompts 4 --tokens 1500` (and `--model gemma3 --tokens 640`) on two Xeon cores,
# on llama.cpp without the shape-invariant kernel.
AGREEMENT = {
    "noflash": ("on the embedded model, 32 argmax flips in 6,000 ids decoded one at a time "
                "against 16-id forwards (29 of them while the cache held under 256 ids) and 0 "
                "in 24 cold against warm prefills; on Gemma 3 270M 4 in 2,560"),
    "flash": ("on the embedded model, 4 argmax flips in 6,000 ids decoded one at a time "
              "against 16-id forwards and 0 in 24 cold against warm prefills"),
}
WEIGHTS = ("for the embedded model's Q4_1 weights (other weight types may round batched "
           "matmuls differently: python -m ffwd.bench.agreement measures a model)")


def greedy_promise(engine: str, device: str, dtype: str, threads: int = 0,
                   invariant: bool | None = None) -> tuple[bool, str]:
    """Whether greedy output is independent of how ids are batched into forwards, and why.
    For llama.cpp, `dtype` names the KV cache and the attention path (``gguf-kv-q8_0``,
    ``gguf-kv-f16-noflash``: `LlamaCppBackend.dtype_name`; ``gguf-kv-`` before the first
    load has chosen one) and `invariant` whether the build has the shape-invariant kernel
    (None: ask the installed library).

    >>> greedy_promise("transformers", "cpu", "float32")[0]
    True
    >>> greedy_promise("transformers", "cpu", "bfloat16")[1][:3]
    'no:'
    >>> greedy_promise("llamacpp", "cpu", "gguf-kv-q8_0", 2, invariant=False)[0]
    True
    >>> greedy_promise("llamacpp", "cpu", "gguf-kv-f16", 2, invariant=True)[0]
    True
    >>> greedy_promise("llamacpp", "cpu", "gguf-kv-f16", 2, invariant=False)[0]
    False
    >>> greedy_promise("llamacpp", "cuda", "gguf-kv-f16", 2, invariant=True)[0]
    False
    """
    if engine in ("llamacpp", "llama.cpp"):
        if invariant is None:
            from ffwd.engine.llama.native import shape_invariant, system_info

            invariant = shape_invariant(system_info())
        return _llama_promise(device, dtype, invariant)
    if engine == "transformers" and device == "cpu" and dtype == "float32":
        return True, ("yes: float32 on CPU; greedy output is the same with fill on or off and "
                      "with a cold or a warm prompt cache")
    why = ("reduced precision rounds differently for different batch shapes"
           if dtype != "float32" else "GPU kernels are chosen by batch shape")
    return False, (f"no: {why}, so greedy output can change with fill on/off and with the "
                   "prompt-cache state (use --dtype float32 on CPU for identical output)")


def _llama_promise(device: str, dtype: str, invariant: bool) -> tuple[bool, str]:
    kv = dtype.removeprefix("gguf-kv-").removesuffix("-noflash")
    if device != "cpu":
        return False, ("no: on the GPU llama.cpp chooses its attention and matmul kernels by "
                       "batch shape, so greedy output can change with fill on or off and with "
                       "the prompt cache's state; --deterministic runs on the CPU, where it is "
                       "exact")
    if not kv:
        return False, ("not known until the first load has measured the attention paths and "
                       "chosen one: " + ("every flash-attention path is exact with this build, "
                                         "the plain path is not" if invariant else "flash "
                                         "attention on a q8_0 or bf16 cache is exact, the "
                                         "other paths are not")
                       + "; --deterministic keeps to the exact ones")
    path = AttentionPath(not dtype.endswith("-noflash"), kv)
    if path.exact(invariant):
        kernel = ("the shape-invariant flash-attention kernel (patches/llama.cpp) computes "
                  "every row alike whatever the forward" if invariant and kv == "f16" else
                  f"flash attention on a {kv} cache computes every row alike")
        return True, (f"yes: {kernel}, so greedy output is the same with fill on or off, with "
                      "a cold or a warm prompt cache and alone or beside other requests, on "
                      f"any number of threads, {WEIGHTS}")
    name = "plain attention" if not path.flash else "flash attention"
    fix = ("--deterministic (FFWD_DETERMINISTIC=1) keeps to the flash-attention paths, which "
           "are exact" if invariant else "--deterministic (FFWD_DETERMINISTIC=1) makes it "
           "bit-identical (flash attention on a q8_0 or bf16 cache), at a slower prefill; "
           "`make install` builds llama.cpp with the shape-invariant kernel")
    return False, (f"no, not bit for bit: on this attention path ({name}, {kv} cache) "
                   "llama.cpp rounds batched and one-id forwards apart, so at near-ties greedy "
                   "output can flip with fill on or off and with the prompt cache's state: "
                   f"{AGREEMENT['noflash' if not path.flash else 'flash']}. {fix}")


def loaded_promise(backend: Backend) -> tuple[bool, str]:
    """`greedy_promise` for a loaded backend (what `ffwd serve` prints at start)."""
    invariant = getattr(backend, "invariant", None)
    device = "gpu" if getattr(backend, "n_gpu_layers", 0) else backend.device.type
    return greedy_promise(backend.engine, device, backend.dtype_name, backend.threads,
                          invariant if isinstance(invariant, bool) else None)
