"""transformers' ``model.generate`` as a bench system (`ffwd.bench.systems`): greedy,
in this process, optionally with prompt lookup (``hf-prompt-lookup``)."""

from __future__ import annotations

import time
from typing import Any

from ffwd.bench.systems import Decoder, Outcome
from ffwd.bench.workloads import Item

LOOKUP_TOKENS = 10


class HFGenerate:
    """transformers' ``model.generate``, greedy, optionally with prompt lookup."""

    def __init__(self, model: Any, decoder: Decoder, lookup: int = 0) -> None:
        self.model = model
        self.decoder = decoder
        self.lookup = lookup
        self.name = "hf-prompt-lookup" if lookup else "hf-generate"

    def begin(self, session: str) -> None:
        pass  # each generate() starts from nothing

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        eos = sorted(self.decoder.eos_ids)
        config = GenerationConfig(
            max_new_tokens=item.max_tokens, do_sample=False, eos_token_id=eos,
            pad_token_id=eos[0], prompt_lookup_num_tokens=self.lookup or None,
        )
        x = torch.tensor([prompt_ids], dtype=torch.long, device=self.model.device)
        stop = StoppingCriteriaList([_CallComplete(self.decoder, item, len(prompt_ids))]
                                    if item.single_call else [])
        counter, first = _Counter(), _FirstToken()
        hook = self.model.register_forward_pre_hook(counter)
        try:
            t0 = time.perf_counter()
            with torch.no_grad():
                out = self.model.generate(
                    x, attention_mask=torch.ones_like(x), generation_config=config,
                    stopping_criteria=stop, streamer=first,
                )
            seconds = time.perf_counter() - t0
        finally:
            hook.remove()
        new = out[0, len(prompt_ids) :].tolist()
        return self.decoder.finish(item, new, seconds, (first.at or t0) - t0, counter.n)


class _Counter:
    """A forward pre-hook that counts the model's forward calls."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.n += 1


class _FirstToken:
    """A `generate` streamer that notes when the first new id arrives (prefill done)."""

    def __init__(self) -> None:
        self.puts = 0
        self.at: float | None = None

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts == 2:  # the first put is the prompt
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


class _CallComplete:
    """A stopping criterion: `generate` stops once the new ids parse as a complete call."""

    def __init__(self, decoder: Decoder, item: Item, prompt_len: int) -> None:
        self.decoder, self.item, self.prompt_len = decoder, item, prompt_len

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = self.decoder.has_call(self.item, input_ids[0, self.prompt_len :].tolist())
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
