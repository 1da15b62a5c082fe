"""The AMX guard on a real load: weights that llama.cpp would repack (Q4_0 here) go to
CPU_REPACK normally, and to plain CPU buffers when the build line says the AMX kernels
are in (the guard turns the extra buffer types off); the guarded model still runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ffwd.engine.llama import context as llamacpp
from ffwd.engine.llama import native
from ffwd.engine.llama.context import LlamaContext
from tools.random_gguf import write

AMX_LINE = "CPU : AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | REPACK = 1 |"


@pytest.fixture(scope="module")
def q4_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "q4_0.gguf"
    return write(path, embd=256, layers=2, ff=512, heads=4, kv_heads=2, vocab=512,
                 context=512, kind="q4_0")


def test_q4_0_weights_are_repacked_unless_guarded(q4_0: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plain = LlamaContext(q4_0, n_ctx=256, threads=1)
    if "REPACK = 1" not in native.system_info():
        pytest.skip("this build of llama.cpp has no REPACK kernels")
    assert "CPU_REPACK" in plain.load.weights
    monkeypatch.setattr(llamacpp, "system_info", lambda: AMX_LINE)  # what the backend reads
    guarded = LlamaContext(q4_0, n_ctx=256, threads=1)
    assert "CPU_REPACK" not in guarded.load.weights and guarded.load.weights
    for b in (plain.sequences[0], guarded.sequences[0]):
        b.prefill([5, 9, 17, 33])
        assert b.append([7]).shape == (512,)
