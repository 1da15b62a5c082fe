"""Which sequence runs a request, and what its cache starts from (``--parallel N``).

A context of N sequences (`Context.sequences`: llama.cpp's ``--parallel N``;
one for transformers) runs up to N requests at once, each on a sequence of its
own. `Slots.take(prompt)` gives a run the free sequence whose cache holds the
longest prefix of its prompt (ties: an empty one, then the one used least
recently, so an idle conversation's cache lasts longest), and makes that cache
the best start there is:

1. a sibling sequence, running or not, that holds `SHARE_MIN` ids more of the
   prompt than this cache and the prompt cache's saved states do (the same
   system prompt and tools: an agent's sub-agents) is copied
   (`save_state`/`load_state`: llama.cpp copies the sequence's cells, nothing
   is forwarded again), after the live state is saved if the prompt would
   throw much of it away (`PromptCache.stash`);
2. otherwise the prompt cache chooses (`PromptCache.select`: another
   conversation's state is saved before it is thrown away, and a saved state
   that shares more of the prompt is loaded).

The prefill then forwards only what no cache held. `give_back` frees the
sequence when its run ends, emptied if the run failed. The engine's loop
(`ffwd.engine.core.scheduler`) is the only caller: nothing here is locked.
"""

from __future__ import annotations

from collections.abc import Sequence

from ffwd.engine.backend import Backend
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.fill.prefix import common_prefix

SHARE_MIN = 32  # ids a sibling's cache must save before it is copied


class Slots:
    """The sequences of one context: which are free, and each run's start (module docstring)."""

    def __init__(self, sequences: Sequence[Backend], cache: PromptCache) -> None:
        if not sequences:
            raise ValueError("Slots: no sequences")
        self.sequences = list(sequences)
        self.cache = cache
        self._free = list(range(len(self.sequences)))  # least recently used first

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def free(self) -> int:
        """How many sequences no run holds now."""
        return len(self._free)

    @property
    def forward_calls(self) -> int:
        """Forwards of every sequence (a forward that carried k sequences counts k)."""
        return sum(s.forward_calls for s in self.sequences)

    def take(self, prompt: Sequence[int]) -> Backend:
        """A free sequence for a run of `prompt`, its cache made the best start (there must
        be a free one)."""
        i = self._choose(prompt)
        self._free.remove(i)
        seq = self.sequences[i]
        try:
            self._start(seq, prompt)
        except BaseException:
            self.give_back(seq, failed=True)
            raise
        return seq

    def give_back(self, seq: Backend, *, failed: bool = False) -> None:
        """`seq`'s run is over: it is free again (emptied when the run `failed`: what it
        left is not trusted)."""
        if failed:
            seq.reset()
        self._free.append(self.sequences.index(seq))

    def _choose(self, prompt: Sequence[int]) -> int:
        """The free sequence whose cache serves `prompt` best (module docstring)."""
        usable = len(prompt) - 1  # the prefill always forwards the prompt's last id

        def score(i: int) -> tuple[int, bool, int]:
            ids = self.sequences[i].cached_ids
            return min(common_prefix(ids, prompt), usable), not ids, -self._free.index(i)

        return max(self._free, key=score)

    def _start(self, seq: Backend, prompt: Sequence[int]) -> None:
        """Make `seq`'s cache the best start for `prompt` (module docstring)."""
        usable = len(prompt) - 1
        have = min(common_prefix(seq.cached_ids, prompt), usable)
        best = max(have, self.cache.best(prompt, seq.trims_freely)) + SHARE_MIN
        donor = None
        for other in self.sequences:
            ids = other.cached_ids
            n = min(common_prefix(ids, prompt), usable)
            if other is not seq and n >= best and (n == len(ids) or seq.trims_freely):
                best, donor = n, other
        if donor is None:
            self.cache.select(seq, prompt)
            return
        self.cache.stash(seq, prompt)
        seq.load_state(donor.save_state())
