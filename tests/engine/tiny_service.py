"""The real `ModelService` on a tiny random model with the embedded model's tokenizer:
the whole request path (template, tools, rows, fill, decode, parsing) in milliseconds."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from ffwd.config import FillConfig, TokenLimits
from ffwd.engine.hf import HFBackend
from ffwd.models import load_tokenizer
from ffwd.serve.request import GenerationRequest
from ffwd.serve.service import ModelService, Ready
from tests.engine.tiny_models import tiny_model


@cache
def tokenizer() -> Any:
    return load_tokenizer("default")


class CappedService(ModelService):
    """Generations capped at `cap` tokens, so a fuzzer's max_tokens costs nothing."""

    cap = 4

    def prepare(self, req: GenerationRequest) -> Ready:
        ready = super().prepare(req)
        prep = ready.prepared
        return replace(ready, prepared=replace(prep, max_tokens=min(prep.max_tokens, self.cap)))


def tiny_service(fill: FillConfig | None = None, *, capped: bool = True,
                 context: int = 2048, limits: TokenLimits | None = None) -> ModelService:
    tok = tokenizer()
    model = tiny_model(vocab=len(tok), max_position_embeddings=context)
    backend = HFBackend(model, eos_ids=frozenset({tok.eos_token_id}), prefill_chunk=512)
    cls = CappedService if capped else ModelService
    return cls(backend, tok, "tiny", fill or FillConfig(mode="echo"), limits=limits)
