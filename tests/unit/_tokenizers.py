"""The two offline tokenizers the template tests run on, loaded once per process
(the GGUF conversion itself is cached on disk by `ffwd.models`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from ffwd.models import load_tokenizer

SPECS = ("default", "gemma3")  # SmolLM2 (byte-level BPE), Gemma 3 (SentencePiece)


@cache
def tokenizer(spec: str) -> Any:
    return load_tokenizer(spec)
