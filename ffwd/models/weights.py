"""The transformers engine's weights: device and dtype, and a GGUF file dequantized once.

A GGUF file is dequantized to float32 (~20 s for the default model) and the
result is kept as safetensors under `ffwd.config.cache_dir()`, so later loads
read that copy.
"""

from __future__ import annotations

import os
from typing import Any

from ffwd.models.cache import check_tree, read_cached, save_tree
from ffwd.models.files import ModelRef, cached_conversion
from ffwd.models.resolve import resolve_model


def pick_device(device: str = "auto") -> str:
    """`auto` is CUDA when torch sees a GPU, else CPU."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def torch_dtype(dtype: str, device: str) -> Any:
    """The torch dtype for `dtype` on `device`.

    `auto` is bfloat16 on CUDA, and on a CPU with native bfloat16 support
    (AVX512-BF16/AMX), where decoding is memory-bound and bfloat16 measured
    ~1.5x faster per step than float32 for the embedded model; float32 on
    other CPUs. Greedy fill is token-identical to plain decoding only in
    float32 (bfloat16 multi-id forwards round differently).
    """
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device != "cpu" or _cpu_has_bf16() else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype {dtype!r}: expected auto, {', '.join(table)}")
    return table[dtype]


def _cpu_has_bf16() -> bool:
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def load_model(
    spec: str | os.PathLike[str] | ModelRef, *, dtype: str = "auto", device: str = "auto"
) -> Any:
    """A transformers causal LM in eval mode on `device`.

    A GGUF file is dequantized once (float32, ~20 s for the default model) and
    the result is kept as safetensors under `cache_dir()/models`, so later
    loads read that copy (a damaged copy is converted again: `ffwd.models.cache`).
    """
    from transformers import AutoModelForCausalLM

    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    dev = pick_device(device)
    dtype_ = torch_dtype(dtype, dev)
    model: Any
    if ref.gguf_file is None:
        model = AutoModelForCausalLM.from_pretrained(ref.directory, dtype=dtype_)
    else:
        cached = cached_conversion("models", ref)
        model = read_cached(cached, lambda p: AutoModelForCausalLM.from_pretrained(
            check_tree(p), dtype=dtype_), "converted model")
        if model is None:
            converted = _dequantize(ref)
            saved = save_tree(converted, cached, "converted model")
            model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype_) if saved \
                else converted.to(dtype_)
            del converted
    moved: Any = model.to(dev)
    return moved.eval()


def _dequantize(ref: ModelRef) -> Any:
    """`ref`'s GGUF as a float32 transformers model that `save_pretrained` can save."""
    import torch
    from transformers import AutoModelForCausalLM

    converted = AutoModelForCausalLM.from_pretrained(
        ref.directory, gguf_file=ref.gguf_file, dtype=torch.float32
    )
    # The weights are already dequantized; transformers only keeps a GGUF
    # marker that makes save_pretrained refuse. Drop it to save plain tensors.
    converted.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(converted.config, "quantization_config"):
        del converted.config.quantization_config
    return converted
