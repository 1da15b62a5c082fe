"""One sequence of a llama.cpp context: the `Backend` every sequence of ``--parallel N`` is.

A llama.cpp context holds `n_seq` sequences, each with a KV stream of its own
(`ffwd.engine.llama.kv`). `LlamaSequence` is the `Backend` of one of them: its
ids, its forwards (parts of its context's `decode`: one ``llama_decode`` for
every sequence the engine steps together, or for this one alone when called
directly), its rewinds (``llama_memory_seq_rm`` on its own sequence), its
checkpoints and saved states (``llama_state_seq_*``: a state saved from one
sequence loads into any other of the same context, so the prompt cache and a
prefix copied from a running sibling serve every sequence).

What the cache can do:

* attention (full or sliding window): `llama_memory_seq_rm` drops any tail.
  The sliding-window cache is kept full size (`swa_full`), so ids that slid
  out of the window are still there when a rewind brings them back into it.
  A saved sequence state holds only the window's ids of those layers, so
  after `restore`/`load_state` a rewind may go back only until the window
  would need an id the state left out (`rewindable` says how far).
* recurrent state (Mamba, RWKV) and hybrids that carry one: the state is
  updated in place, so `can_rewind` is False and `checkpoint`/`restore` copy
  the sequence state out and back.

`LlamaContext` (`ffwd.engine.llama.context`) owns the model, the context and the
sequences, and fills in `Shared`, what they read of it.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ffwd.engine.backend import (
    CacheBookkeeping,
    CacheState,
    Context,
    check_rewind,
    keep_common_prefix,
)
from ffwd.engine.core.batch import Part
from ffwd.engine.cost.batched import SequenceCost
from ffwd.engine.cost.surface import CostSurface, Pricing
from ffwd.engine.llama.attention import AttentionPath, AttentionTable


@dataclass(frozen=True, slots=True)
class _Snapshot:
    owner: int  # id() of the context's `Shared`: any of its sequences may load it
    ids: tuple[int, ...]
    data: ctypes.Array[ctypes.c_uint8]
    size: int
    last_logits: torch.Tensor | None


@dataclass(eq=False)
class Shared:
    """What the sequences of one context read of it: the library, the context (reopened on
    another attention path by its owner), the model's facts and the measured costs."""

    lib: Any
    path: str
    vocab: int
    eos: frozenset[int]
    max_append: int
    n_ctx: int  # ids per sequence
    recurrent: bool
    n_swa: int
    threads: int
    attention: AttentionPath
    owner: Context | None = None
    ctx: Any = None
    mem: Any = None
    surface: CostSurface | None = None  # measured by the loader (ffwd.models)
    table: AttentionTable | None = None
    tie_margin: float = 0.0  # the loader's (FFWD_TIE_MARGIN)
    invariant: bool = False  # the build has the shape-invariant flash-attention kernel
    running: list[int] = field(default_factory=list)  # the sequences running now
    lock: threading.Lock = field(default_factory=threading.Lock)  # every call on the context
    on_surface: Callable[[CostSurface], None] = lambda surface: None


class LlamaSequence(CacheBookkeeping):
    """Sequence `seq` of a llama.cpp context; implements `Backend` (module docstring)."""

    engine = "llama.cpp"
    device = torch.device("cpu")

    def __init__(self, shared: Shared, seq: int) -> None:
        self._shared = shared
        self.seq = seq
        self._vocab = shared.vocab
        self._eos = shared.eos
        self._max_append = shared.max_append
        self._ids: list[int] = []
        self._last: torch.Tensor | None = None
        self._forward_calls = 0
        self._pricing: SequenceCost | None = None

    # --- facts ----------------------------------------------------------
    @property
    def context(self) -> Context:
        assert self._shared.owner is not None
        return self._shared.owner

    @property
    def threads(self) -> int:
        return self._shared.threads

    @property
    def attention(self) -> AttentionPath:
        return self._shared.attention

    @property
    def invariant(self) -> bool:
        """Whether the build has the shape-invariant flash-attention kernel."""
        return self._shared.invariant

    @property
    def kv_type(self) -> str:
        return self.attention.kv

    @property
    def dtype_name(self) -> str:
        """The weights' types are the file's own; the KV cache's is the one in use."""
        return f"gguf-kv-{self.kv_type}" + ("" if self.attention.flash else "-noflash")

    @property
    def context_window(self) -> int:
        return self._shared.n_ctx

    @property
    def cost(self) -> CostSurface | None:
        """The measured surface every sequence of the context shares."""
        return self._shared.surface

    @cost.setter
    def cost(self, surface: CostSurface | None) -> None:
        self._shared.surface = surface
        if surface is not None:
            self._shared.on_surface(surface)

    @property
    def pricing(self) -> Pricing | None:
        """The shared surface, priced beside the sequences running now (`SequenceCost`)."""
        base = self._shared.surface
        if base is None:
            return None
        if self._pricing is None or self._pricing.base is not base:
            self._pricing = SequenceCost(base, self._batch_depths)
        return self._pricing

    @property
    def tie_margin(self) -> float:
        return self._shared.tie_margin

    @tie_margin.setter
    def tie_margin(self, margin: float) -> None:
        self._shared.tie_margin = margin

    @property
    def attention_table(self) -> AttentionTable | None:
        return self._shared.table

    @attention_table.setter
    def attention_table(self, table: AttentionTable | None) -> None:
        self._shared.table = table

    def _batch_depths(self) -> list[int]:
        """The depths of the other sequences that are running now."""
        seqs = self._shared.owner.sequences if self._shared.owner is not None else []
        return [seqs[s].cache_len for s in self._shared.running if s != self.seq]

    @property
    def can_rewind(self) -> bool:
        return not self._shared.recurrent

    @property
    def rewindable(self) -> int:
        if not self.can_rewind:
            return 0
        sh = self._shared
        low = 0
        if sh.n_swa:
            with sh.lock:
                low = sh.lib.llama_memory_seq_pos_min(sh.mem, self.seq)
        if low <= 0:
            return len(self._ids)
        # Window layers hold positions from `low` on (a loaded state): the id after
        # the cut still needs the n_swa ids before it.
        return max(0, len(self._ids) - (low + sh.n_swa))

    @property
    def can_checkpoint(self) -> bool:
        return True

    @property
    def trims_freely(self) -> bool:
        """Whether a saved state can be cut back to any prefix (plain attention only)."""
        return self.can_rewind and not self._shared.n_swa

    # --- cache ----------------------------------------------------------
    def reset(self) -> None:
        sh = self._shared
        with sh.lock:
            sh.lib.llama_memory_seq_rm(sh.mem, self.seq, -1, -1)
            self._ids = []
            self._last = None

    def rewind(self, n: int) -> None:
        """Drop the last `n` ids from the cache; raise if the cache cannot."""
        if n == 0:
            return
        check_rewind(self, n, self._shared.path)
        keep = len(self._ids) - n
        sh = self._shared
        with sh.lock:
            if not sh.lib.llama_memory_seq_rm(sh.mem, self.seq, keep, -1):
                raise RuntimeError(f"llama.cpp refused to drop positions {keep}.. of the cache")
            del self._ids[keep:]
            self._last = None

    def checkpoint(self) -> object:
        """A copy of the sequence state (cache and ids) for `restore`."""
        sh = self._shared
        with sh.lock:
            size = int(sh.lib.llama_state_seq_get_size(sh.ctx, self.seq))
            data = (ctypes.c_uint8 * max(size, 1))()
            written = int(sh.lib.llama_state_seq_get_data(sh.ctx, data, size, self.seq))
            if written != size:
                raise RuntimeError(f"llama.cpp wrote {written} of {size} state bytes")
            return _Snapshot(id(sh), tuple(self._ids), data, size, self._last)

    def restore(self, checkpoint: object) -> None:
        """Put the cache back exactly as it was at `checkpoint` (taken from any sequence of
        this context)."""
        sh = self._shared
        if not isinstance(checkpoint, _Snapshot) or checkpoint.owner != id(sh):
            raise ValueError("restore: not a checkpoint of this backend")
        with sh.lock:
            sh.lib.llama_memory_seq_rm(sh.mem, self.seq, -1, -1)  # a whole sequence always goes
            self._ids, self._last = [], None
            if checkpoint.ids and not sh.lib.llama_state_seq_set_data(
                sh.ctx, checkpoint.data, checkpoint.size, self.seq
            ):
                raise RuntimeError("llama.cpp could not load the saved sequence state")
            self._ids = list(checkpoint.ids)
            self._last = checkpoint.last_logits

    def save_state(self) -> CacheState:
        """The whole sequence as it is now, for `load_state`."""
        snap = self.checkpoint()
        assert isinstance(snap, _Snapshot)
        return CacheState(snap.ids, snap, snap.size)

    def load_state(self, state: CacheState) -> None:
        """Make the cache exactly what `save_state` saved (on any sequence of the context)."""
        self.restore(state.snapshot)

    # --- forwards ---------------------------------------------------------
    def keep_prefix(self, ids: list[int]) -> int:
        return keep_common_prefix(self, ids)

    def prefill(self, ids: list[int]) -> int:
        """Make the cache hold `ids`; return how many leading ids were reused."""
        reuse = self.keep_prefix(ids)
        rest = list(ids[reuse:])
        self.check(rest, whole=False)
        for start in range(0, len(rest), self._max_append):
            self.context.decode([Part(self.seq, rest[start : start + self._max_append], False)])
        return reuse

    def forward(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits for every position, ``(len(ids), vocab)``."""
        self.check(ids, whole=True)
        return self.context.decode([Part(self.seq, list(ids), True)])[0]

    def append(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits of the last position only, ``(vocab,)``."""
        self.check(ids, whole=True)
        return self.context.decode([Part(self.seq, list(ids), False)])[0][-1]

    def check(self, ids: list[int], *, whole: bool) -> None:
        """Refuse a forward the context cannot take, before it joins a step."""
        n = len(ids)
        if n == 0:
            raise ValueError("forward of no ids")
        if whole and n > self._max_append:
            raise ValueError(f"forward of {n} ids: max_append is {self._max_append}")
        if len(self._ids) + n > self._shared.n_ctx:
            raise ValueError(f"forward of {n} ids after {len(self._ids)}: the context holds "
                             f"{self._shared.n_ctx}")
        if min(ids) < 0 or max(ids) >= self._vocab:
            raise ValueError(f"token ids must be in 0..{self._vocab - 1}")

    def took(self, ids: list[int], rows: torch.Tensor) -> None:
        """A forward put `ids` into this sequence's cells; `rows` are its logits."""
        self._ids.extend(ids)
        self._forward_calls += 1
        self._last = rows[-1]

    def drop_ids(self) -> None:
        """The context was reopened: this sequence's cache is empty."""
        self._ids, self._last = [], None

    def drop_all(self) -> None:
        """A failed forward may have left some of its ids' cells: start clean."""
        sh = self._shared
        sh.lib.llama_memory_seq_rm(sh.mem, self.seq, -1, -1)
        self._ids, self._last = [], None
