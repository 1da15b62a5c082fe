"""A model's tokenizer, converted once from a GGUF by transformers and cached.

transformers converts a GGUF's vocabulary into a fast tokenizer in seconds, so
the converted copy is kept under `ffwd.config.cache_dir()` and reused (a
damaged one is converted again: `ffwd.models.cache`). The rows compiler and the
grammar need that fast tokenizer (character offsets, llguidance's view); the
file's own metadata (`ffwd.models.ggufmeta`) adds what the conversion leaves out.
"""

from __future__ import annotations

import os
from typing import Any

from ffwd.models.cache import check_tree, read_cached, save_tree
from ffwd.models.files import ModelRef, cached_conversion
from ffwd.models.ggufmeta import gguf_meta
from ffwd.models.resolve import resolve_model


def load_tokenizer(spec: str | os.PathLike[str] | ModelRef) -> Any:
    """The model's tokenizer (a transformers PreTrainedTokenizerBase); a GGUF's carries
    every chat template the file names (``{"default": ..., "tool_use": ...}`` where it
    has named ones), which transformers' GGUF reader leaves out."""
    from transformers import AutoTokenizer

    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    if ref.gguf_file is None:
        return AutoTokenizer.from_pretrained(ref.directory)
    cached = cached_conversion("tokenizers", ref)
    tok = read_cached(cached, lambda p: AutoTokenizer.from_pretrained(check_tree(p)),
                      "converted tokenizer")
    if tok is None:
        tok = _convert(ref)
        save_tree(tok, cached, "converted tokenizer")
    templates = gguf_meta(ref.path).templates
    if len(templates) > 1:
        tok.chat_template = templates
    return tok


def _convert(ref: ModelRef) -> Any:
    """The GGUF's vocabulary as a fast tokenizer. transformers reads the model's
    config to pick the tokenizer's class, and fails on architectures it cannot map
    (Gemma 4's per-layer ``num_key_value_heads``): then the vocabulary alone."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(ref.directory, gguf_file=ref.gguf_file)
    except (StrictDataclassError, ValueError, KeyError, TypeError):
        return PreTrainedTokenizerFast.from_pretrained(ref.directory, gguf_file=ref.gguf_file)
