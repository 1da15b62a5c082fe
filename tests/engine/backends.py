"""Every backend on tiny models, by case name ``"<backend>:<family>"``.

transformers cases run `tiny_models` (built from a config); llama.cpp cases
run `tiny_gguf` files, written once per process into a temporary directory;
``llamacpp-seq`` cases run the same files as the middle sequence of a
three-sequence context (``--parallel 3``) whose neighbours hold other ids, so
the contract holds for every sequence of a batched context, not only the first.
(A plain module, like `tiny_models`.)
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.engine.tiny_gguf import write_tiny_gguf
from tests.engine.tiny_models import tiny_backend

CHUNK = 64  # ids per prefill forward (and the most per forward) in every case


def _offloads() -> bool:
    from ffwd.engine.llama.native import gpu_offload

    return gpu_offload()


ATTENTION = ["transformers:llama", "transformers:qwen2_sliding", "transformers:lfm2",
             "llamacpp:llama", "llamacpp:gemma3", "llamacpp-seq:llama", "llamacpp-seq:gemma3"]
if _offloads():  # a GPU build of llama.cpp: the same contract with every layer offloaded
    ATTENTION += ["llamacpp-gpu:llama", "llamacpp-gpu:gemma3"]
RECURRENT = ["transformers:qwen3_next", "transformers:falcon_h1", "llamacpp:mamba",
             "llamacpp-seq:mamba"]
CASES = ATTENTION + RECURRENT

_dir: Path | None = None


def _gguf(family: str, eos: int | None) -> Path:
    global _dir
    if _dir is None:
        _dir = Path(tempfile.mkdtemp(prefix="ffwd-tiny-gguf-"))
        atexit.register(shutil.rmtree, _dir, True)
    path = _dir / f"{family}-{eos}.gguf"
    if not path.exists():
        write_tiny_gguf(family, path, eos=eos)
    return path


def make_backend(case: str, eos: Sequence[int] = ()) -> Any:
    """A fresh backend for `case` whose EOS ids are `eos` (llama.cpp: at most one)."""
    kind, family = case.split(":")
    if kind == "transformers":
        return tiny_backend(family, eos=eos)
    from ffwd.engine.llama.context import LlamaContext

    if len(eos) > 1:
        raise ValueError("the tiny GGUF files declare at most one EOS id")
    path = _gguf(family, eos[0] if eos else None)
    layers = -1 if kind == "llamacpp-gpu" else 0
    parallel = 3 if kind == "llamacpp-seq" else 1
    ctx = LlamaContext(path, n_ctx=512, n_batch=CHUNK, threads=1, n_gpu_layers=layers,
                       parallel=parallel)
    if parallel == 1:
        return ctx.sequences[0]
    first, middle, last = ctx.sequences
    first.prefill([(7 * i) % 60 + 3 for i in range(90)])  # neighbours with other ids
    last.prefill([(5 * i) % 60 + 3 for i in range(30)])
    return middle
