"""Write a llama-architecture GGUF file with random weights, for timing (no trained weights).

    python -m tools.random_gguf OUT.gguf [--embd 2048] [--layers 16] [--ff 5632]
        [--heads 32] [--kv-heads 8] [--vocab 32000] [--context 8192] [--type q4_0]

Forward costs depend on shapes and weight types, not on what the weights
learned, so a random model of the right size times like a real one: a
1B-parameter Q4_0 model is ~0.6 GiB and is written in about a minute. The
vocabulary is placeholder pieces (``t3``...; id 2 ends a turn), so llama.cpp
loads it and runs it on ids; it has no tokenizer to speak of.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

TYPES = ("f32", "f16", "q8_0", "q4_0")


def _weight(rand: np.random.Generator, rows: int, cols: int, kind: str) -> np.ndarray:
    """A (rows, cols) weight in `kind` as gguf stores it (quantized rows as uint8)."""
    import gguf

    w = rand.normal(0, 0.02, (rows, cols)).astype(np.float32)
    if kind == "f32":
        return w
    if kind == "f16":
        return w.astype(np.float16)
    return gguf.quants.quantize(w, _raw(kind))


def write(path: Path, *, embd: int, layers: int, ff: int, heads: int, kv_heads: int,
          vocab: int, context: int, kind: str, seed: int = 0) -> Path:
    """Write the model to `path` and return it."""
    import gguf

    rand = np.random.default_rng(seed)
    head = embd // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(context)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [1] * (vocab - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    shapes = {"attn_q": (heads * head, embd), "attn_k": (kv_heads * head, embd),
              "attn_v": (kv_heads * head, embd), "attn_output": (embd, heads * head),
              "ffn_gate": (ff, embd), "ffn_up": (ff, embd), "ffn_down": (embd, ff)}
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, np.float32))
        for name, (rows, cols) in shapes.items():
            data = _weight(rand, rows, cols, kind)
            w.add_tensor(f"blk.{i}.{name}.weight", data, raw_dtype=_raw(kind))
    w.add_tensor("token_embd.weight", _weight(rand, vocab, embd, kind), raw_dtype=_raw(kind))
    w.add_tensor("output_norm.weight", np.ones(embd, np.float32))
    w.add_tensor("output.weight", _weight(rand, vocab, embd, kind), raw_dtype=_raw(kind))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _raw(kind: str) -> Any:
    """The quantized type gguf is told a tensor's bytes are (None: the array's own)."""
    import gguf

    return {"f32": None, "f16": None, "q8_0": gguf.GGMLQuantizationType.Q8_0,
            "q4_0": gguf.GGMLQuantizationType.Q4_0}[kind]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.random_gguf",
                                description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--embd", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--ff", type=int, default=5632)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--type", choices=TYPES, default="q4_0")
    a = p.parse_args(argv)
    write(a.out, embd=a.embd, layers=a.layers, ff=a.ff, heads=a.heads, kv_heads=a.kv_heads,
          vocab=a.vocab, context=a.context, kind=a.type)
    size = a.out.stat().st_size / 2**20
    params = a.layers * (2 * a.embd * a.embd + 2 * a.embd * a.embd * a.kv_heads // a.heads
                         + 3 * a.embd * a.ff) + 2 * a.vocab * a.embd
    print(f"{a.out}: {params / 1e9:.2f}B parameters, {a.type}, {size:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
