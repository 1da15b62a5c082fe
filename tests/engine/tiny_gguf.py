"""Tiny random GGUF files for the llama.cpp backend: written in milliseconds, float32.

Three cache kinds, like the transformers families in `tiny_models`:

* ``llama``: plain attention (any rewind).
* ``gemma3``: every layer a sliding window of 6 ids (the window must not lose
  what a rewind gives back).
* ``mamba``: recurrent state only (no rewind; checkpoint and restore).

The vocabulary is 64 placeholder pieces (``t3``...); with `eos` given, that id
is the EOS and the one id llama.cpp reports as end of generation, without it
there is none (no tokenizer at all). Shapes are numpy's (rows, columns); the writer stores
them in ggml's reversed order, which is what llama.cpp's loaders expect.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB, EMBD, FF, HEADS, KV_HEADS, LAYERS = 64, 32, 64, 4, 2, 2
HEAD = EMBD // HEADS
FAMILIES = ("llama", "gemma3", "mamba")


def _attention(rand: np.random.Generator, arch: str) -> dict[str, np.ndarray]:
    t: dict[str, np.ndarray] = {}
    for i in range(LAYERS):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(EMBD, np.float32)
        t[p + "attn_q.weight"] = rand.normal(0, 0.3, (HEADS * HEAD, EMBD))
        t[p + "attn_k.weight"] = rand.normal(0, 0.3, (KV_HEADS * HEAD, EMBD))
        t[p + "attn_v.weight"] = rand.normal(0, 0.3, (KV_HEADS * HEAD, EMBD))
        t[p + "attn_output.weight"] = rand.normal(0, 0.3, (EMBD, HEADS * HEAD))
        t[p + "ffn_norm.weight"] = np.ones(EMBD, np.float32)
        t[p + "ffn_gate.weight"] = rand.normal(0, 0.3, (FF, EMBD))
        t[p + "ffn_up.weight"] = rand.normal(0, 0.3, (FF, EMBD))
        t[p + "ffn_down.weight"] = rand.normal(0, 0.3, (EMBD, FF))
        if arch == "gemma3":  # llama.cpp's gemma norms take the weight as stored (1 + w)
            for norm in ("post_attention_norm", "post_ffw_norm"):
                t[p + norm + ".weight"] = np.ones(EMBD, np.float32)
            for norm in ("attn_q_norm", "attn_k_norm"):
                t[p + norm + ".weight"] = np.ones(HEAD, np.float32)
    return t


def _mamba(rand: np.random.Generator, inner: int, state: int, conv: int, rank: int
           ) -> dict[str, np.ndarray]:
    t: dict[str, np.ndarray] = {}
    for i in range(LAYERS):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(EMBD, np.float32)
        t[p + "ssm_in.weight"] = rand.normal(0, 0.3, (2 * inner, EMBD))
        t[p + "ssm_conv1d.weight"] = rand.normal(0, 0.3, (inner, conv))
        t[p + "ssm_conv1d.bias"] = rand.normal(0, 0.1, inner)
        t[p + "ssm_x.weight"] = rand.normal(0, 0.3, (rank + 2 * state, inner))
        t[p + "ssm_dt.weight"] = rand.normal(0, 0.3, (inner, rank))
        t[p + "ssm_dt.bias"] = rand.normal(0, 0.1, inner)
        t[p + "ssm_a"] = -np.exp(rand.normal(0, 0.5, (inner, state)))
        t[p + "ssm_d"] = np.ones(inner, np.float32)
        t[p + "ssm_out.weight"] = rand.normal(0, 0.01, (EMBD, inner))  # mostly residual
    return t


def piece(i: int) -> str:
    """The vocabulary entry of id `i` (neutral names: none is an end marker by its text)."""
    return ("<unk>", "<c1>", "<c2>")[i] if i < 3 else f"t{i}"


def write_tiny_gguf(family: str, path: Path, *, eos: int | None = None, seed: int = 0) -> Path:
    """Write a tiny random model of `family` (one of `FAMILIES`) to `path`."""
    import gguf

    rand = np.random.default_rng(seed)
    arch = family
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(512)
    w.add_embedding_length(EMBD)
    w.add_block_count(LAYERS)
    w.add_layer_norm_rms_eps(1e-5)
    if eos is None:
        w.add_tokenizer_model("none")
        w.add_vocab_size(VOCAB)
    else:
        w.add_tokenizer_model("llama")
        w.add_token_list([piece(i) for i in range(VOCAB)])
        w.add_token_scores([0.0] * VOCAB)
        w.add_token_types([2, 3, 3] + [1] * (VOCAB - 3))  # unknown, control x2, normal
        w.add_bos_token_id(1)
        w.add_eos_token_id(eos)
    if family == "mamba":
        inner, state, conv, rank = 2 * EMBD, 8, 4, 4
        w.add_ssm_conv_kernel(conv)
        w.add_ssm_inner_size(inner)
        w.add_ssm_state_size(state)
        w.add_ssm_time_step_rank(rank)
        w.add_feed_forward_length(0)
        w.add_head_count(0)
        tensors = _mamba(rand, inner, state, conv, rank)
    else:
        w.add_feed_forward_length(FF)
        w.add_head_count(HEADS)
        w.add_head_count_kv(KV_HEADS)
        w.add_rope_dimension_count(HEAD)
        if family == "gemma3":
            w.add_sliding_window(6)
            w.add_key_length(HEAD)
            w.add_value_length(HEAD)
        tensors = _attention(rand, arch)
    tensors["token_embd.weight"] = rand.normal(0, 1.0, (VOCAB, EMBD))
    tensors["output_norm.weight"] = np.ones(EMBD, np.float32)
    tensors["output.weight"] = rand.normal(0, 1.0, (VOCAB, EMBD))
    for name, value in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
