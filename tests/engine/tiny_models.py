"""Tiny randomly initialised transformers models, built from a config, seeded, on CPU.

(A plain module, not conftest.py: the integration tier has its own conftest.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ffwd.engine.hf import HFBackend

_BASE = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
)

# Extra config per family: small enough to build in milliseconds.
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2_sliding": dict(
        model_type="qwen2", sliding_window=6, use_sliding_window=True, max_window_layers=0,
        layer_types=["sliding_attention", "sliding_attention"],
    ),
    "lfm2": dict(layer_types=["conv", "full_attention"]),
    "qwen3_next": dict(
        num_hidden_layers=4, linear_num_value_heads=4, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, head_dim=8, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
    ),
    "falcon_h1": dict(
        mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8, mamba_n_groups=1,
        head_dim=8,
    ),
    "mamba": dict(state_size=8),
}


def tiny_model(
    family: str = "llama", *, vocab: int = 64, seed: int = 0, scale: float = 1.0, **extra: Any
) -> Any:
    """A seeded random causal LM; `scale` multiplies the output head (sharper logits)."""
    cfg_kwargs = {**_BASE, **FAMILIES[family], **extra, "vocab_size": vocab}
    model_type = cfg_kwargs.pop("model_type", family)
    cfg = AutoConfig.for_model(model_type, **cfg_kwargs)
    cfg.eos_token_id = None
    cfg.tie_word_embeddings = False
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(scale)
    return model


def tiny_backend(family: str = "llama", *, eos: Sequence[int] = (), **kw: Any) -> HFBackend:
    return HFBackend(tiny_model(family, **kw), eos_ids=frozenset(eos), prefill_chunk=64)


class CharTokenizer:
    """One printable character per id: enough for stop strings and text deltas."""

    ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?-"

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = False) -> str:
        return "".join(self.ALPHABET[i % len(self.ALPHABET)] for i in ids)

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.decode([token_id])


def repetitive_prompt(seed: int, vocab: int = 64, length: int = 48) -> list[int]:
    """A prompt built from a few short phrases repeated in random order."""
    g = torch.Generator().manual_seed(seed)
    phrases = [torch.randint(0, vocab, (int(n),), generator=g).tolist() for n in (5, 7, 9)]
    out: list[int] = []
    while len(out) < length:
        out += phrases[int(torch.randint(0, 3, (1,), generator=g))]
    return out[:length]
