"""The transformers backend: any causal LM that transformers loads, one sequence.

`HFBackend` is both the `Backend` of its one sequence and its `Context` (a
context of one: the engine's steps carry this sequence alone).

The cache is a `DynamicCache` built from the model's config, so each layer
gets the kind transformers would give it (full attention, sliding window,
short convolution, recurrent state). What that means for cutting back:

* full attention: `crop(-n)` drops the last n ids, any n.
* sliding-window and convolution layers keep only a bounded past. With past
  recording on they keep everything until the next `crop`, so the ids of the
  last forward can be dropped; before every forward we settle them with
  `crop(0)`, which shrinks them back to their window. `rewindable` says how far
  back a rewind may go and `rewind` refuses to go further.
* recurrent state (Mamba, gated delta-net, hybrids that carry one) is updated
  in place and can never be cropped: `can_rewind` is False, and `checkpoint`
  clones that state so `restore` can put it back.
* `mamba` and `falcon_mamba` in transformers restart the scan from a zero
  state whenever more than one id enters a non-empty cache, so those models
  append one id per forward (`max_append == 1`) and always prefill from empty
  (`prompt_chunk`: only an empty cache takes a whole prompt in one forward).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import LinearAttentionCacheLayerMixin

from ffwd.engine.backend import (
    CacheBookkeeping,
    CacheState,
    Context,
    check_rewind,
    keep_common_prefix,
)
from ffwd.engine.core.batch import BatchStats, Part
from ffwd.engine.cost.surface import CostSurface, Pricing
from ffwd.engine.llama.attention import AttentionTable

# See the module docstring: multi-id appends silently lose the state.
SCAN_RESTARTS_ON_APPEND = frozenset({"mamba", "falcon_mamba"})
DEFAULT_CONTEXT_WINDOW = 8192  # when the model's config does not say


@dataclass(frozen=True, slots=True)
class _Snapshot:
    layers: tuple[dict[str, Any], ...]
    n_ids: int
    since_settle: int
    last_logits: torch.Tensor | None


def _layer_state(attrs: dict[str, Any]) -> dict[str, Any]:
    """A restorable copy of one cache layer's attributes (`vars(layer)`).

    Key/value tensors are shared, not copied: `DynamicLayer` grows them with
    `torch.cat` and crops by slicing, never writing in place. Conv and
    recurrent states live in dicts and are updated in place, so they are cloned.
    """
    state = dict(attrs)
    for name, value in state.items():
        if isinstance(value, dict):
            state[name] = {
                k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in value.items()
            }
    return state


def _config_eos(model: Any) -> frozenset[int]:
    ids: set[int] = set()
    for cfg in (getattr(model, "generation_config", None), model.config):
        eos = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(int(e) for e in eos)
    return frozenset(ids)


class HFBackend(CacheBookkeeping):
    """A transformers causal LM and its cache; implements `ffwd.engine.backend.Backend`."""

    engine = "transformers"
    seq = 0

    def __init__(
        self,
        model: Any,
        *,
        eos_ids: frozenset[int] | None = None,
        prefill_chunk: int = 512,
    ) -> None:
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk={prefill_chunk}: expected an integer >= 1")
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.model_type: str = getattr(model.config, "model_type", "")
        self._vocab = int(model.get_output_embeddings().weight.shape[0])
        self._eos = frozenset(eos_ids) if eos_ids is not None else _config_eos(model)
        self._one_at_a_time = self.model_type in SCAN_RESTARTS_ON_APPEND
        self._max_append = 1 if self._one_at_a_time else prefill_chunk
        params = inspect.signature(model.forward).parameters
        self._keep_kw = "logits_to_keep" in params
        self._forward_calls = 0
        self.cost: CostSurface | None = None  # measured by the loader (ffwd.models)
        self.attention_table: AttentionTable | None = None  # llama.cpp's only
        self.reset()

    # --- facts ----------------------------------------------------------
    @property
    def context(self) -> Context:
        return self

    @property
    def sequences(self) -> Sequence[HFBackend]:
        return [self]

    @property
    def limit(self) -> int:
        return self.prompt_chunk

    @property
    def budget(self) -> int:
        return self._max_append

    @property
    def pricing(self) -> Pricing | None:
        return self.cost

    def set_running(self, seqs: Sequence[int]) -> None:
        """Nothing to price beside: this context has one sequence."""

    def batch_stats(self) -> BatchStats:
        """Every forward carried this one sequence."""
        n = self._forward_calls
        return BatchStats(n, {1: n} if n else {})

    @property
    def prompt_chunk(self) -> int:
        """The most prompt ids the next forward may take (module docstring)."""
        empty = self._one_at_a_time and not self._ids
        return self.context_window if empty else self._max_append

    @property
    def dtype_name(self) -> str:
        return str(self.model.dtype).removeprefix("torch.")

    @property
    def threads(self) -> int:
        return int(torch.get_num_threads())

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0)
                   or DEFAULT_CONTEXT_WINDOW)

    @property
    def can_rewind(self) -> bool:
        # Linear-attention layers say whether they hold recurrent state only
        # once initialised; an empty cache has nothing to rewind anyway.
        return not self._ids or bool(self._cache.is_croppable)

    @property
    def rewindable(self) -> int:
        if not self.can_rewind:
            return 0
        return self._since_settle if self._bounded else len(self._ids)

    @property
    def can_checkpoint(self) -> bool:
        return not self._one_at_a_time

    # --- cache ----------------------------------------------------------
    def reset(self) -> None:
        self._cache = DynamicCache(config=self.model.config)
        layers = self._cache.layers
        self._bounded = any(
            getattr(layer, "is_sliding", False) or isinstance(layer, LinearAttentionCacheLayerMixin)
            for layer in layers
        )
        if self._bounded and not self._one_at_a_time:
            self._cache.activate_past_recording()
        self._ids: list[int] = []
        self._since_settle = 0
        self._last: torch.Tensor | None = None

    def rewind(self, n: int) -> None:
        """Drop the last `n` ids from the cache; raise if the cache cannot."""
        if n == 0:
            return
        check_rewind(self, n, self.model_type)
        with torch.no_grad():
            self._cache.crop(-n)
        del self._ids[-n:]
        self._since_settle -= n
        self._last = None

    def checkpoint(self) -> object:
        """Snapshot the cache (recurrent and conv states cloned) for `restore`."""
        if not self.can_checkpoint:
            raise RuntimeError(f"{self.model_type}: checkpoint is not supported")
        with torch.no_grad():
            layers = tuple(_layer_state(vars(layer)) for layer in self._cache.layers)
        return _Snapshot(layers, len(self._ids), self._since_settle, self._last)

    def restore(self, checkpoint: object) -> None:
        """Put the cache back as it was at `checkpoint` (each snapshot restores once)."""
        if not isinstance(checkpoint, _Snapshot) or len(checkpoint.layers) != len(
            self._cache.layers
        ):
            raise ValueError("restore: not a checkpoint of this cache")
        if checkpoint.n_ids > len(self._ids):
            raise ValueError("restore: the checkpoint is newer than the cache")
        for layer, state in zip(self._cache.layers, checkpoint.layers, strict=True):
            vars(layer).update(state)
        del self._ids[checkpoint.n_ids :]
        self._since_settle = checkpoint.since_settle
        self._last = checkpoint.last_logits

    @property
    def trims_freely(self) -> bool:
        """Whether any saved state can be cut back to any prefix (plain attention only)."""
        return not self._bounded and not self._one_at_a_time and bool(self._cache.is_croppable)

    def save_state(self) -> CacheState:
        """The whole cache as it is now, for `load_state` (tensors shared, never written)."""
        snap = self.checkpoint()
        assert isinstance(snap, _Snapshot)
        seen: set[int] = set()
        nbytes = 0
        for layer in snap.layers:
            for value in layer.values():
                tensors = value.values() if isinstance(value, dict) else (value,)
                for t in tensors:
                    if isinstance(t, torch.Tensor):
                        storage = t.untyped_storage()
                        if storage.data_ptr() not in seen:
                            seen.add(storage.data_ptr())
                            nbytes += storage.nbytes()
        return CacheState(tuple(self._ids), snap, nbytes)

    def load_state(self, state: CacheState) -> None:
        """Make the cache exactly what `save_state` saved (any sequence before)."""
        snap = state.snapshot
        if not isinstance(snap, _Snapshot) or len(snap.layers) != len(self._cache.layers):
            raise ValueError("load_state: not a state of this model's cache")
        for layer, saved in zip(self._cache.layers, snap.layers, strict=True):
            vars(layer).clear()
            vars(layer).update(_layer_state(saved))
        self._ids = list(state.ids)
        self._since_settle = snap.since_settle
        self._last = snap.last_logits

    # --- forwards ---------------------------------------------------------
    def keep_prefix(self, ids: list[int]) -> int:
        return keep_common_prefix(self, ids, can_reuse=not self._one_at_a_time)

    def prefill(self, ids: list[int]) -> int:
        """Make the cache hold `ids`; return how many leading ids were reused."""
        reuse = self.keep_prefix(ids)
        rest = list(ids[reuse:])
        while rest:
            n = self.prompt_chunk
            self.decode([Part(0, rest[:n], False)])
            rest = rest[n:]
        return reuse

    def forward(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits for every position, ``(len(ids), vocab)``."""
        return self.decode([Part(0, list(ids), True)])[0]

    def append(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits of the last position only, ``(vocab,)``."""
        return self.decode([Part(0, list(ids), False)])[0][-1]

    def decode(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        """The context's one forward: this sequence's one part, timed into the surface."""
        if len(parts) != 1 or parts[0].seq != 0:
            raise ValueError(f"a transformers backend runs one sequence, not parts {parts}")
        part, depth = parts[0], len(self._ids)
        t0 = time.perf_counter()
        rows = self._run(part.ids, keep=0 if part.all_rows else 1, limit=self.prompt_chunk)
        if self.cost is not None:
            self.cost.observe(len(part.ids), (time.perf_counter() - t0) * 1000,
                              "rows" if part.all_rows else "last", depth)
        return [rows]

    def _run(self, ids: list[int], *, keep: int, limit: int | None = None) -> torch.Tensor:
        if not ids:
            raise ValueError("forward of no ids")
        if len(ids) > (limit or self._max_append):
            raise ValueError(f"forward of {len(ids)} ids: max_append is {self._max_append}")
        if self._bounded and self._ids and not self._one_at_a_time:
            with torch.no_grad():
                self._cache.crop(0)  # shrink window/conv layers back; see the module docstring
            self._since_settle = 0
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        kwargs: dict[str, Any] = {"input_ids": x, "cache": self._cache, "use_cache": True}
        if self._keep_kw:
            kwargs["logits_to_keep"] = keep
        with torch.no_grad():
            out = self.model(**kwargs)
        self._forward_calls += 1
        self._ids.extend(ids)
        self._since_settle += len(ids)
        logits = out.logits[0]
        if keep:
            logits = logits[-keep:]
        logits = logits.float()
        self._last = logits[-1]
        return logits
