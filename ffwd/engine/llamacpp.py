"""The llama.cpp backend: a GGUF model through llama-cpp-python's C API, one sequence.

Implements `ffwd.engine.backend.Backend` on the low-level `llama_cpp` module
(not its `Llama` class): one context, one sequence (id 0), one reusable
`llama_batch` whose per-row logits flags ask llama.cpp for exactly the rows
a call returns: every row for `forward`, the last for `append` and prefill.
On a 262k vocabulary the output head is a large share of a short forward,
and each row copied out is 1 MB.

What the cache can do:

* attention (full or sliding window): `llama_memory_seq_rm` drops any tail.
  The sliding-window cache is kept full size (`swa_full`), so ids that slid
  out of the window are still there when a rewind brings them back into it.
  A saved sequence state holds only the window's ids of those layers, so
  after `restore`/`load_state` a rewind may go back only until the window
  would need an id the state left out (`rewindable` says how far).
* recurrent state (Mamba, RWKV) and hybrids that carry one: the state is
  updated in place, so `can_rewind` is False and `checkpoint`/`restore` copy
  the sequence state out and back (`llama_state_seq_get_data/set_data`).
  `save_state`/`load_state` (the prompt cache) use the same copy on every
  model.

Attention: the context runs on one `AttentionPath` (flash attention on or off,
the KV cache's type), the first of `paths` until the loader has timed them all
and picked one (`ffwd.engine.attention`); `use_attention` reopens the context on
another path (the cache starts empty). Fidelity: with an f16 cache and flash
attention, a one-id forward over 512 cells or more splits the KV range over
the threads, and a micro-batch of 64 ids or more takes a tiled f32 kernel; both
round differently from the per-row kernel other forwards take, so greedy output
can change with fill and with the prompt cache's state, at near-ties
(`ffwd.bench.agreement` counts how often). With ``deterministic``
(``--deterministic``) the paths are flash attention on a q8_0 cache (where the
heads fit its blocks) or a bf16 one: every forward takes the per-row kernel,
and on the embedded Q4_1 model one-id, batched, cold and warm forwards agree
exactly at every length tried, on any number of threads. Weights whose batched
matmuls round differently from one-id ones (other quantizations) can still
differ.

llama.cpp's own log lines go nowhere unless the backend is built with
``log=True`` (FFWD_LLAMACPP_LOG=1).
"""

from __future__ import annotations

import ctypes
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ffwd.engine.attention import AttentionPath, AttentionTable, candidates
from ffwd.engine.backend import CacheBookkeeping, CacheState, check_rewind, keep_common_prefix
from ffwd.engine.cost import CostSurface
from ffwd.engine.llamactx import exact_kv, new_context, reserved_mib
from ffwd.engine.native import (
    LoadReport,
    capture,
    device_key,
    gpu_layers,
    gpu_offload,
    init_llama,
    load_model,
    system_info,
)
from ffwd.engine.threads import BUSY, Contention, ThreadChooser

DEFAULT_CONTEXT_CAP = 8192  # n_ctx when not given: the model's own, at most this
_SEQ = 0  # the one sequence this backend runs


@dataclass(frozen=True, slots=True)
class _Snapshot:
    owner: int  # id() of the backend that took it
    ids: tuple[int, ...]
    data: ctypes.Array[ctypes.c_uint8]
    size: int
    last_logits: torch.Tensor | None


def _free(lib: Any, batch: Any, ctx: list[Any], model: Any) -> None:
    lib.llama_batch_free(batch)
    if ctx[0] is not None:
        lib.llama_free(ctx[0])
    lib.llama_model_free(model)


# --- the backend --------------------------------------------------------------------


class LlamaCppBackend(CacheBookkeeping):
    """A GGUF model on llama.cpp and its sequence cache; implements `Backend`."""

    engine = "llama.cpp"
    device = torch.device("cpu")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 0,
        threads: int = 0,
        n_batch: int = 512,
        log: bool = False,
        kv_cache: str = "auto",
        flash_attn: str = "auto",
        n_gpu_layers: str | int = "auto",
        deterministic: bool = False,
    ) -> None:
        if n_batch < 1 or n_ctx < 0 or threads < 0 or kv_cache not in ("f16", "q8_0", "bf16",
                                                                         "auto"):
            raise ValueError(f"n_batch={n_batch}, n_ctx={n_ctx}, threads={threads}, "
                             f"kv_cache={kv_cache!r}: out of range")
        if deterministic and (kv_cache == "f16" or flash_attn == "off"
                              or n_gpu_layers not in ("auto", 0)):
            raise ValueError("deterministic: llama.cpp is exact on the CPU with flash attention "
                             f"on a q8_0 or bf16 KV cache, not kv_cache={kv_cache!r}, "
                             f"flash_attn={flash_attn!r}, n_gpu_layers={n_gpu_layers}")
        self.deterministic = deterministic
        n_gpu_layers = 0 if deterministic else n_gpu_layers
        self.path = os.fspath(path)
        lib = self._lib = init_llama(log)
        line = system_info()
        self.n_gpu_layers = gpu_layers(n_gpu_layers, offload=gpu_offload(), line=line)
        with capture() as lines:  # llama.cpp says where the weights went
            model = self._model = load_model(lib, self.path, self.n_gpu_layers, line)
        self._read_model(lib, model, n_ctx, threads)
        exact = exact_kv(lib, model) if deterministic else None
        self.paths = candidates(flash_attn, kv_cache, exact)  # the loader times them all
        self._max_append = n_batch
        self._ctx: list[Any] = [None]  # the context, reopened by use_attention
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self._finalizer = weakref.finalize(self, _free, lib, self._batch, self._ctx, model)
        for i in range(n_batch):  # every row belongs to the one sequence
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = _SEQ
        self.attention = self.paths[0]
        self.reserved_mib = self._open(self.paths[0], lines)
        self.load = LoadReport.parse(lines)  # weights and the cache
        self._threads = ThreadChooser(self.threads)  # fewer while other processes need cores
        self._others = Contention()  # others' use of the CPUs since the last long forward
        self.device_key = device_key(self.n_gpu_layers)
        self._forward_calls = 0
        self.cost: CostSurface | None = None  # measured by the loader (ffwd.models)
        self.attention_table: AttentionTable | None = None  # likewise
        self._ids: list[int] = []
        self._last: torch.Tensor | None = None

    def _read_model(self, lib: Any, model: Any, n_ctx: int, threads: int) -> None:
        self._vocab_ptr = vocab = lib.llama_model_get_vocab(model)
        self._vocab = int(lib.llama_vocab_n_tokens(vocab))
        self._eos = frozenset(i for i in range(self._vocab) if lib.llama_vocab_is_eog(vocab, i))
        self.recurrent = bool(lib.llama_model_is_recurrent(model)
                              or lib.llama_model_is_hybrid(model))
        self.n_swa = int(lib.llama_model_n_swa(model))  # 0: no sliding-window layers
        self.n_ctx = n_ctx or min(int(lib.llama_model_n_ctx_train(model)), DEFAULT_CONTEXT_CAP)
        self.threads = threads or torch.get_num_threads()

    def _open(self, path: AttentionPath, log: list[str]) -> float:
        """A new context on `path` in place of the old one (freed first); its reserved MiB."""
        lib = self._lib
        if self._ctx[0] is not None:
            lib.llama_free(self._ctx[0])
            self._ctx[0] = None
        ctx, lines = new_context(lib, self._model, n_ctx=self.n_ctx, n_batch=self._max_append,
                                 threads=self.threads, path=path)
        log.extend(lines)
        self._ctx[0] = ctx
        self._mem = lib.llama_get_memory(ctx)
        self._threads_set = (self.threads, self.threads)  # (one-id, batch) llama.cpp has
        self.attention = path
        return reserved_mib(lines)

    def use_attention(self, path: AttentionPath) -> float:
        """Reopen the context on `path` (the cache starts empty); the MiB it reserved."""
        self._ids, self._last = [], None
        self.reserved_mib = self._open(path, [])
        return self.reserved_mib

    @property
    def kv_type(self) -> str:
        return self.attention.kv

    def close(self) -> None:
        """Free the context and the model now (the backend is unusable afterwards)."""
        self._finalizer()

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of `token_id` as llama.cpp stores it."""
        text = self._lib.llama_vocab_get_text(self._vocab_ptr, token_id)
        return bytes(text or b"").decode("utf-8", errors="replace")

    # --- facts ----------------------------------------------------------
    @property
    def dtype_name(self) -> str:
        """The weights' types are the file's own; the KV cache's is the one in use."""
        return f"gguf-kv-{self.kv_type}" + ("" if self.attention.flash else "-noflash")

    @property
    def context_window(self) -> int:
        return self.n_ctx

    @property
    def can_rewind(self) -> bool:
        return not self.recurrent

    @property
    def rewindable(self) -> int:
        if not self.can_rewind:
            return 0
        low = self._lib.llama_memory_seq_pos_min(self._mem, _SEQ) if self.n_swa else 0
        if low <= 0:
            return len(self._ids)
        # Window layers hold positions from `low` on (a loaded state): the id after
        # the cut still needs the n_swa ids before it.
        return max(0, len(self._ids) - (low + self.n_swa))

    @property
    def can_checkpoint(self) -> bool:
        return True

    @property
    def trims_freely(self) -> bool:
        """Whether a saved state can be cut back to any prefix (plain attention only)."""
        return self.can_rewind and not self.n_swa

    # --- cache ----------------------------------------------------------
    def reset(self) -> None:
        self._lib.llama_memory_clear(self._mem, True)
        self._ids = []
        self._last = None

    def rewind(self, n: int) -> None:
        """Drop the last `n` ids from the cache; raise if the cache cannot."""
        if n == 0:
            return
        check_rewind(self, n, self.path)
        keep = len(self._ids) - n
        if not self._lib.llama_memory_seq_rm(self._mem, _SEQ, keep, -1):
            raise RuntimeError(f"llama.cpp refused to drop positions {keep}.. of the cache")
        del self._ids[keep:]
        self._last = None

    def checkpoint(self) -> object:
        """A copy of the sequence state (cache and ids) for `restore`."""
        lib = self._lib
        size = int(lib.llama_state_seq_get_size(self._ctx[0], _SEQ))
        data = (ctypes.c_uint8 * max(size, 1))()
        written = int(lib.llama_state_seq_get_data(self._ctx[0], data, size, _SEQ))
        if written != size:
            raise RuntimeError(f"llama.cpp wrote {written} of {size} state bytes")
        return _Snapshot(id(self), tuple(self._ids), data, size, self._last)

    def restore(self, checkpoint: object) -> None:
        """Put the cache back exactly as it was at `checkpoint`."""
        if not isinstance(checkpoint, _Snapshot) or checkpoint.owner != id(self):
            raise ValueError("restore: not a checkpoint of this backend")
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, _SEQ, -1, -1)  # a whole sequence always goes
        self._ids, self._last = [], None
        if checkpoint.ids and not lib.llama_state_seq_set_data(
            self._ctx[0], checkpoint.data, checkpoint.size, _SEQ
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
        """Make the cache exactly what `save_state` saved."""
        self.restore(state.snapshot)

    # --- forwards ---------------------------------------------------------
    def prefill(self, ids: list[int]) -> int:
        """Make the cache hold `ids`; return how many leading ids were reused."""
        reuse = keep_common_prefix(self, ids)
        rest = list(ids[reuse:])
        for start in range(0, len(rest), self._max_append):
            self._decode(rest[start : start + self._max_append], all_rows=False)
        return reuse

    def forward(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits for every position, ``(len(ids), vocab)``."""
        return self._decode(ids, all_rows=True)

    def append(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits of the last position only, ``(vocab,)``."""
        return self._decode(ids, all_rows=False)[-1]

    @property
    def threads_now(self) -> int:
        """The threads forwards run on now (`threads` or fewer while the cores are shared)."""
        return self._threads.current

    def _observe_step(self, ms: float) -> None:
        if self._threads.expected is None and self.cost is not None:
            cost = self.cost
            self._threads.expected = lambda depth: cost.quiet(1, "last", depth)  # quiet cores
        self._threads.observe(ms, len(self._ids))

    def _use_threads(self, n_ids: int) -> None:
        """One-id steps run on the chooser's count; longer forwards on every thread unless
        others use the CPUs now (a memory-bound step may gain nothing where a prefill does)."""
        if n_ids == 1:
            counts = (self._threads.current, self._threads_set[1])
        else:
            share, self._others = self._others.share(), Contention()
            busy = share is not None and share > BUSY
            counts = (self._threads_set[0], self._threads.settled if busy else self.threads)
        if counts != self._threads_set:
            self._lib.llama_set_n_threads(self._ctx[0], *counts)
            self._threads_set = counts

    def _decode(self, ids: list[int], *, all_rows: bool) -> torch.Tensor:
        """One `llama_decode` of `ids` at the end of the cache; the rows asked for."""
        n = len(ids)
        if n == 0:
            raise ValueError("forward of no ids")
        if n > self._max_append:
            raise ValueError(f"forward of {n} ids: max_append is {self._max_append}")
        if len(self._ids) + n > self.n_ctx:
            raise ValueError(
                f"forward of {n} ids after {len(self._ids)}: the context holds {self.n_ctx}"
            )
        if min(ids) < 0 or max(ids) >= self._vocab:
            raise ValueError(f"token ids must be in 0..{self._vocab - 1}")
        # 1. fill the batch: positions continue the cache; logits only where read.
        batch, pos0, flag = self._batch, len(self._ids), int(all_rows)
        batch.n_tokens = n
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = pos0 + i
            batch.logits[i] = flag
        batch.logits[n - 1] = 1
        # 2. run it. A failure leaves the cache as it was, except a fatal one.
        self._use_threads(n)
        t0 = time.perf_counter()
        rc = self._lib.llama_decode(self._ctx[0], batch)
        if n == 1 and rc == 0:  # one-id steps tell whether fewer threads would be faster
            self._observe_step((time.perf_counter() - t0) * 1000)
        if rc != 0:
            if rc < 0:
                self.reset()  # processed micro-batches may remain: start clean
            raise RuntimeError(f"llama_decode failed (code {rc}) on {n} ids after {pos0}")
        self._forward_calls += 1
        self._ids.extend(ids)
        # 3. copy out the rows asked for.
        rows = range(n) if all_rows else (n - 1,)
        out = np.empty((len(rows), self._vocab), dtype=np.float32)
        nbytes = self._vocab * 4
        for j, i in enumerate(rows):
            ptr = self._lib.llama_get_logits_ith(self._ctx[0], i)
            if not ptr:
                raise RuntimeError(f"llama.cpp has no logits for batch row {i}")
            ctypes.memmove(out[j].ctypes.data, ptr, nbytes)
        logits = torch.from_numpy(out)
        self._last = logits[-1]
        return logits
