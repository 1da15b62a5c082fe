"""Logits processors: ``(logits, ...) -> logits`` on one float32 row, and the output's
id counts the penalties read (`OutputCounts`), kept as the output grows.

`ffwd.engine.sample.sampling.Sampler` applies them in a fixed order: the request's mask, logit
bias, penalties, temperature, top-k, top-p, min-p.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ffwd.fill.prefix import common_prefix


def apply_logit_bias(logits: torch.Tensor, bias: Mapping[int, float]) -> torch.Tensor:
    if not bias:
        return logits
    ids = torch.tensor(list(bias), dtype=torch.long, device=logits.device)
    vals = torch.tensor(list(bias.values()), dtype=logits.dtype, device=logits.device)
    return logits.index_add(0, ids, vals)


def apply_repetition_penalty(
    logits: torch.Tensor, seen: torch.Tensor, penalty: float
) -> torch.Tensor:
    """`seen`: a mask of the ids to penalise (in the prompt or the output)."""
    if penalty == 1.0:
        return logits
    return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty),
                       logits)


def apply_presence_frequency(
    logits: torch.Tensor, counts: torch.Tensor, presence: float, frequency: float
) -> torch.Tensor:
    """`counts`: how often each id occurs in the output."""
    if presence == 0 and frequency == 0:
        return logits
    return logits - frequency * counts - presence * (counts > 0).to(logits.dtype)


class OutputCounts:
    """How often each id occurs in the output, kept as the output moves: `update(generated)`
    compares only what is new since the list it last saw (the same list, grown: the
    loop's output only grows), else the whole list, and counts the difference."""

    def __init__(self, prompt_ids: Sequence[int] = ()) -> None:
        self.ids: list[int] = []
        self.counts = torch.zeros(0)
        self._prompt = list(prompt_ids)
        self._in_prompt = torch.zeros(0, dtype=torch.bool)
        self._last: tuple[Sequence[int] | None, int] = (None, 0)

    def update(self, generated: Sequence[int], vocab: int) -> torch.Tensor:
        """The counts of `generated` (`vocab` wide)."""
        if self.counts.shape[0] != vocab:
            self.counts, self.ids = torch.zeros(vocab), []
            self._in_prompt = torch.zeros(vocab, dtype=torch.bool)
            self._in_prompt[[i for i in self._prompt if i < vocab]] = True
        last, length = self._last
        k = min(length if generated is last else 0, len(self.ids), len(generated))
        k += common_prefix(self.ids[k:], generated[k:])
        for ids, sign in ((self.ids[k:], -1.0), (list(generated[k:]), 1.0)):
            if ids:
                self.counts.index_add_(0, torch.tensor(ids), torch.full((len(ids),), sign))
        self.ids[k:] = generated[k:]
        self._last = (generated, len(generated))
        return self.counts

    def seen(self) -> torch.Tensor:
        """The ids in the prompt or the output so far."""
        return self._in_prompt | (self.counts > 0)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """`logits` / `temperature`; where that overflows, the same shifted so that the top
    logit is 0 (the same distribution).

    A tiny temperature overflows: 3 / 1e-30 is inf (1e-300 is 0 in float32, and 0 / 0
    NaN), and inf - inf is NaN in the softmax. Shifted, the top stays 0 and the others
    go to -inf: the limit of the distribution, greedy.

    >>> apply_temperature(torch.tensor([3.0, 1.0, -float("inf")]), 1e-300).tolist()
    [0.0, -inf, -inf]
    """
    scaled = logits / temperature
    top = logits.max()
    if bool(torch.isfinite(scaled.max())) or not bool(torch.isfinite(top)):
        return scaled  # fine, or nothing finite to shift by (the sampler falls back)
    return torch.where(logits == top, 0.0, (logits - top) / temperature)


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k).values[-1]
    return logits.masked_fill(logits < kth, -float("inf"))


def apply_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely ids whose probability reaches `p`.

    The nucleus is usually small, so it is found with `topk` over a growing k
    instead of sorting the whole vocabulary (a full sort costs milliseconds).
    """
    if p >= 1.0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    n = probs.shape[-1]
    k = min(64, n)
    while True:
        top, order = torch.topk(probs, k)
        mass = torch.cumsum(top, dim=-1)
        if mass[-1] >= p or k == n:
            break
        k = min(4 * k, n)
    # Keep an id while the mass before it is still short of p (the top id always stays).
    kept = order[(mass - top) < p]
    drop = torch.ones_like(logits, dtype=torch.bool)
    drop[kept] = False
    return logits.masked_fill(drop, -float("inf"))


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop ids whose probability is below `min_p` times the top probability."""
    if min_p <= 0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(), -float("inf"))


