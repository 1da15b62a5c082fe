"""The threads a model runs on when none are asked for do not depend on what loaded
before it in the process: a llama.cpp load sets torch to one thread for sampling, and a
second model (llama.cpp or transformers) loaded after it still gets torch's default."""

from __future__ import annotations

import torch

from ffwd.engine.llama.context import LlamaContext
from ffwd.engine.llama.threads import default_threads
from ffwd.models.load import sampling_threads
from tests.engine.backends import _gguf


def test_a_second_model_gets_the_default_threads_not_the_samplers() -> None:
    cores = default_threads()
    before = torch.get_num_threads()
    try:
        first = LlamaContext(_gguf("llama", None), n_ctx=256)
        sampling_threads(1)  # what a llama.cpp load does once the model is up
        assert torch.get_num_threads() == 1
        second = LlamaContext(_gguf("llama", None), n_ctx=256)
        assert first.threads == second.threads == cores
        sampling_threads(0)  # a transformers load that names no count: torch's own again
        assert torch.get_num_threads() == cores
    finally:
        torch.set_num_threads(before)
