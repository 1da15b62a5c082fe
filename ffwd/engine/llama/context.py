"""The llama.cpp engine: a GGUF model through llama-cpp-python's C API.

Works on the low-level `llama_cpp` module (not its `Llama` class).
`LlamaContext` loads the model and opens one context of `parallel` sequences
(``--parallel N``, `ffwd.engine.llama.kv`), each a `LlamaSequence`
(`ffwd.engine.llama.sequence`: ids, rewinds, states, the `Backend`); `open_llama`
gives the first of them, the one a library caller decodes with. `decode` is
the `Context`'s one forward: one ``llama_decode`` over every part of a step
(`ffwd.engine.core.batch`), through one reusable `llama_batch` whose per-row logits
flags ask llama.cpp for exactly the rows each part reads: every row for a
verify span, the last for anything else. On a 262k vocabulary the output head
is a large share of a short forward, and each row copied out is 1 MB.

Attention: the context runs on one `AttentionPath` (flash attention on or off,
the KV cache's type), the first of `paths` until the loader has timed them all
and picked one (`ffwd.engine.llama.attention`); `use_attention` reopens the context on
another path (every sequence's cache starts empty). Fidelity: with the
shape-invariant flash-attention kernel of ``patches/llama.cpp`` (`invariant`,
read from the build line) every flash-attention path is exact on the CPU: a
row's logits do not depend on how many ids its forward carries, its threads or
its micro-batches, so on the embedded Q4_1 model one-id, batched, cold and warm
forwards agree bit for bit, and a sequence's logits are the same alone and
beside others (each reads only its own KV stream). The plain path is not
(its matrix products take other kernels for one row than for many), nor is
unpatched llama.cpp's flash attention on an f16 cache (it splits a one-id
forward over the threads and tiles micro-batches of 64 ids), so greedy output
can change there with fill and the prompt cache's state, at near-ties
(`ffwd.bench.agreement` counts how often). With ``deterministic``
(``--deterministic``) only exact paths are timed (`candidates`). Weights whose
batched matmuls round differently from one-id ones (other quantizations) can
still differ.

llama.cpp's own log lines go nowhere unless the backend is built with
``log=True`` (FFWD_LLAMACPP_LOG=1).
"""

from __future__ import annotations

import ctypes
import os
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ffwd.engine.core.batch import BatchStats, Part
from ffwd.engine.cost.batched import observe_parts, prefill_budget
from ffwd.engine.cost.surface import CostSurface
from ffwd.engine.llama.attention import AttentionPath, candidates
from ffwd.engine.llama.kv import exact_kv, new_context, reserved_mib
from ffwd.engine.llama.native import (
    LoadReport,
    capture,
    device_key,
    gpu_layers,
    gpu_offload,
    init_llama,
    load_model,
    shape_invariant,
    system_info,
)
from ffwd.engine.llama.sequence import LlamaSequence, Shared
from ffwd.engine.llama.threads import BUSY, Contention, ThreadChooser, default_threads

DEFAULT_CONTEXT_CAP = 8192  # n_ctx when not given: the model's own, at most this


def _free(lib: Any, batch: Any, ctx: list[Any], model: Any) -> None:
    lib.llama_batch_free(batch)
    if ctx[0] is not None:
        lib.llama_free(ctx[0])
    lib.llama_model_free(model)


def open_llama(path: str | os.PathLike[str], **settings: Any) -> LlamaSequence:
    """The first sequence of a new `LlamaContext` on the GGUF file at `path` (the backend a
    library caller decodes with; `backend.context` is the rest)."""
    return LlamaContext(path, **settings).sequences[0]


class LlamaContext:
    """A GGUF model on llama.cpp: its context of `parallel` sequences and their forwards
    (a `Context`; the module docstring says how)."""

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
        parallel: int = 1,
    ) -> None:
        if n_batch < 1 or n_ctx < 0 or threads < 0 or parallel < 1 or kv_cache not in (
                "f16", "q8_0", "bf16", "auto"):
            raise ValueError(f"n_batch={n_batch}, n_ctx={n_ctx}, threads={threads}, "
                             f"parallel={parallel}, kv_cache={kv_cache!r}: out of range")
        lib = self._lib = init_llama(log)
        line = system_info()
        self.invariant = shape_invariant(line)  # every flash path exact on the CPU
        if deterministic and ((kv_cache == "f16" and not self.invariant) or flash_attn == "off"
                              or n_gpu_layers not in ("auto", 0)):
            caches = "any" if self.invariant else "a q8_0 or bf16"
            raise ValueError(f"deterministic: llama.cpp is exact on the CPU with flash attention "
                             f"on {caches} KV cache, not kv_cache={kv_cache!r}, "
                             f"flash_attn={flash_attn!r}, n_gpu_layers={n_gpu_layers}")
        self.deterministic = deterministic
        self.parallel = parallel
        n_gpu_layers = 0 if deterministic else n_gpu_layers
        self.n_gpu_layers = gpu_layers(n_gpu_layers, offload=gpu_offload(), line=line)
        with capture() as lines:  # llama.cpp says where the weights went
            model = self._model = load_model(lib, os.fspath(path), self.n_gpu_layers, line)
        self.shared = sh = self._read_model(lib, model, os.fspath(path), n_ctx, threads, n_batch)
        self.limit = n_batch
        self.budget = n_batch  # prompt ids per shared step, once the surface says
        sh.owner = self
        sh.on_surface = self._on_surface
        exact = exact_kv(lib, model) if deterministic else None
        self.paths = candidates(flash_attn, kv_cache, exact, self.invariant)  # timed at load
        sh.attention = self.paths[0]
        self.sequences = [LlamaSequence(sh, i) for i in range(parallel)]
        self._stats = BatchStats()
        self._ctx: list[Any] = [None]  # the context, reopened by use_attention
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self._finalizer = weakref.finalize(self, _free, lib, self._batch, self._ctx, model)
        for i in range(n_batch):  # one sequence per row; which one, each step says
            self._batch.n_seq_id[i] = 1
        self.reserved_mib = self._open(self.paths[0], lines)
        self.load = LoadReport.parse(lines)  # weights and the cache
        self._threads = ThreadChooser(self.threads)  # fewer while other processes need cores
        self._others = Contention()  # others' use of the CPUs since the last long forward
        self.device_key = device_key(self.n_gpu_layers)

    def _read_model(self, lib: Any, model: Any, path: str, n_ctx: int, threads: int,
                    n_batch: int) -> Shared:
        self._vocab_ptr = vocab = lib.llama_model_get_vocab(model)
        size = int(lib.llama_vocab_n_tokens(vocab))
        self.vocab = size
        self.n_swa = int(lib.llama_model_n_swa(model))  # 0: no sliding-window layers
        self.n_ctx = n_ctx or min(int(lib.llama_model_n_ctx_train(model)), DEFAULT_CONTEXT_CAP)
        self.path = path
        return Shared(
            lib, path, size, frozenset(i for i in range(size) if lib.llama_vocab_is_eog(vocab, i)),
            n_batch, self.n_ctx,
            bool(lib.llama_model_is_recurrent(model) or lib.llama_model_is_hybrid(model)),
            self.n_swa, threads or default_threads(), AttentionPath(True, "f16"),
            invariant=self.invariant)

    # --- facts ----------------------------------------------------------
    @property
    def threads(self) -> int:
        return self.shared.threads

    @property
    def recurrent(self) -> bool:
        return self.shared.recurrent

    @property
    def attention(self) -> AttentionPath:
        return self.shared.attention

    @property
    def threads_now(self) -> int:
        """The threads forwards run on now (`threads` or fewer while the cores are shared)."""
        return self._threads.current

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of `token_id` as llama.cpp stores it."""
        text = self._lib.llama_vocab_get_text(self._vocab_ptr, token_id)
        return bytes(text or b"").decode("utf-8", errors="replace")

    def batch_stats(self) -> BatchStats:
        return self._stats.copy()

    def set_running(self, seqs: Sequence[int]) -> None:
        self.shared.running = list(seqs)

    def close(self) -> None:
        """Free the context and the model now (the sequences are unusable afterwards)."""
        self._finalizer()

    # --- the context ------------------------------------------------------
    def _on_surface(self, surface: CostSurface) -> None:
        """A measured surface: the prompt ids a shared step carries follow it."""
        self.budget = prefill_budget(surface)

    def _open(self, path: AttentionPath, log: list[str]) -> float:
        """A new context on `path` in place of the old one (freed first); its reserved MiB."""
        lib, sh = self._lib, self.shared
        with sh.lock:
            if self._ctx[0] is not None:
                lib.llama_free(self._ctx[0])
                self._ctx[0] = sh.ctx = sh.mem = None
            for seq in self.sequences:  # every cache starts empty
                seq.drop_ids()
            ctx, lines = new_context(lib, self._model, n_ctx=self.n_ctx, n_batch=self.limit,
                                     threads=self.threads, path=path, n_seq=self.parallel)
            log.extend(lines)
            self._ctx[0] = sh.ctx = ctx
            sh.mem = lib.llama_get_memory(ctx)
            self._threads_set = (self.threads, self.threads)  # (one-id, batch) llama.cpp has
            sh.attention = path
        return reserved_mib(lines)

    def use_attention(self, path: AttentionPath) -> float:
        """Reopen the context on `path` (every cache starts empty); the MiB it reserved."""
        self.reserved_mib = self._open(path, [])
        return self.reserved_mib

    def _observe_step(self, ms: float, depth: int) -> None:
        surface = self.shared.surface
        if self._threads.expected is None and surface is not None:
            self._threads.expected = lambda d: surface.quiet(1, "last", d)  # quiet cores
        self._threads.observe(ms, depth)

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

    def decode(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        """One `llama_decode` of every part: each sequence's ids at the end of its cache;
        the rows each part asks for."""
        seqs = self.sequences
        for p in parts:
            seqs[p.seq].check(p.ids, whole=False)
        with self.shared.lock:
            depths = [seqs[p.seq].cache_len for p in parts]
            n = self._fill_batch(parts, depths)
            self._use_threads(n)
            t0 = time.perf_counter()
            rc = self._lib.llama_decode(self._ctx[0], self._batch)
            ms = (time.perf_counter() - t0) * 1000
            if rc != 0:
                for p in parts:  # processed micro-batches may remain: start those clean
                    seqs[p.seq].drop_all()
                raise RuntimeError(f"llama_decode failed (code {rc}) on {n} ids of "
                                   f"{len(parts)} sequence(s)")
            rows = self._rows(parts)
        self._observe(parts, depths, ms)
        for p, r in zip(parts, rows, strict=True):
            seqs[p.seq].took(p.ids, r)
        return rows

    def _observe(self, parts: Sequence[Part], depths: list[int], ms: float) -> None:
        """What the step took: the batch's stats, the thread chooser (one-id steps) and the
        cost surface's running level."""
        self._stats.count(len(parts))
        if len(parts) == 1 and len(parts[0].ids) == 1:  # fewer threads faster?
            self._observe_step(ms, depths[0])
        if self.shared.surface is not None:
            observe_parts(self.shared.surface, [
                (len(p.ids), d, "rows" if p.all_rows else "last")
                for p, d in zip(parts, depths, strict=True)], ms)

    def _fill_batch(self, parts: Sequence[Part], depths: list[int]) -> int:
        """Fill the batch: positions continue each cache; logits only where read."""
        batch, i = self._batch, 0
        for p, pos0 in zip(parts, depths, strict=True):
            flag = int(p.all_rows)
            for j, token in enumerate(p.ids):
                batch.token[i] = token
                batch.pos[i] = pos0 + j
                batch.seq_id[i][0] = p.seq
                batch.logits[i] = flag
                i += 1
            batch.logits[i - 1] = 1
        batch.n_tokens = i
        return i

    def _rows(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        """Copy out the rows each part asked for."""
        out: list[torch.Tensor] = []
        nbytes, start = self.vocab * 4, 0
        for p in parts:
            rows = range(start, start + len(p.ids)) if p.all_rows else (start + len(p.ids) - 1,)
            got = np.empty((len(rows), self.vocab), dtype=np.float32)
            for j, i in enumerate(rows):
                ptr = self._lib.llama_get_logits_ith(self._ctx[0], i)
                if not ptr:
                    raise RuntimeError(f"llama.cpp has no logits for batch row {i}")
                ctypes.memmove(got[j].ctypes.data, ptr, nbytes)
            out.append(torch.from_numpy(got))
            start += len(p.ids)
        return out
