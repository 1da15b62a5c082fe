"""Prompt cache: keep the KV state of earlier conversations, LRU, bounded by bytes.

Multi-turn agents resend the whole conversation, so most of a prompt is
usually a prefix that some earlier request already ran through the model.
The backend always keeps its live cache (the last request's prompt and
output) and `prefill` reuses its longest common prefix by itself. This cache
adds the states of *other* conversations: before a request, if a saved state
shares a longer prefix with the prompt than the live cache does, the live
state is saved and the better one loaded; `prefill` then trims it to the
common prefix and runs only the rest.

A saved state is usable only if it is an exact prefix of the prompt, or if the
backend's cache can be cut back anywhere (`trims_freely`: sliding-window and
recurrent caches cannot).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ffwd.engine.backend import Backend, CacheState
from ffwd.fill.prefix import common_prefix

# A prefill that would drop more than this many live ids (and a quarter of
# them) is taken as a switch to another conversation: the live state is kept.
# Fewer is the next turn of the same one (a re-tokenised reply end).
MIN_DISCARD = 16


@dataclass
class PromptCacheStats:
    loads: int = 0  # requests that switched to a saved state
    saves: int = 0
    evictions: int = 0


class PromptCache:
    """Saved backend states, most recently used last, at most `max_bytes` in all."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"prompt cache bytes={max_bytes}: expected an integer >= 0")
        self.max_bytes = max_bytes
        self.stats = PromptCacheStats()
        self._entries: OrderedDict[int, CacheState] = OrderedDict()
        self._next = 0
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every saved state."""
        self._entries.clear()
        self._bytes = 0

    def select(self, backend: Backend, prompt: Sequence[int]) -> None:
        """Before prefill: make the backend hold the state that best serves `prompt`.

        A saved state that shares a longer usable prefix than the live cache is
        loaded, and the live one saved in its place. Otherwise, if the prefill
        is about to throw away much of the live cache (another conversation,
        not the next turn of this one), the live state is saved first.
        """
        if self.max_bytes == 0:
            return
        live = backend.cached_ids
        best_key, best = self._best(prompt, backend.trims_freely)
        if best_key is not None and best > self._shared(live, prompt):
            chosen = self._entries.pop(best_key)
            self._bytes -= chosen.nbytes
            if live:
                self._store(backend.save_state())
            backend.load_state(chosen)
            self.stats.loads += 1
        else:
            self.stash(backend, prompt)

    def best(self, prompt: Sequence[int], trims_freely: bool) -> int:
        """The most ids of `prompt` a saved state would serve (`select` would load it)."""
        return self._best(prompt, trims_freely)[1]

    def stash(self, backend: Backend, prompt: Sequence[int]) -> None:
        """Save the live state if a prefill of `prompt` is about to throw away much of it
        (another conversation, not the next turn of this one)."""
        if self.max_bytes == 0:
            return
        live = backend.cached_ids
        if len(live) - self._shared(live, prompt) > max(MIN_DISCARD, len(live) // 4):
            self._store(backend.save_state())

    @staticmethod
    def _shared(ids: Sequence[int], prompt: Sequence[int]) -> int:
        # The prefill always runs the prompt's last id, so a prefix is usable up to len-1.
        return min(common_prefix(ids, prompt), len(prompt) - 1)

    def _best(self, prompt: Sequence[int], trims_freely: bool) -> tuple[int | None, int]:
        best_key, best = None, 0
        for key, state in self._entries.items():
            n = self._shared(state.ids, prompt)
            if n > best and (n == len(state.ids) or trims_freely):
                best_key, best = key, n
        return best_key, best

    def _store(self, state: CacheState) -> None:
        if state.nbytes > self.max_bytes:
            return
        self._entries[self._next] = state
        self._next += 1
        self._bytes += state.nbytes
        self.stats.saves += 1
        while self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes
            self.stats.evictions += 1

