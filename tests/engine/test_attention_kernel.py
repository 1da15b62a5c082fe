"""The CPU flash-attention kernel of ``patches/llama.cpp``, checked by the patched build's
own programs (``make peers`` builds them beside the peers): against ggml's reference path
(the per-row kernel, ``use_ref``) within test-backend-ops' tolerance on every
FLASH_ATTN_EXT case it generates (cache types, head sizes, masks, ALiBi, softcap, sinks,
GQA, permuted and MLA views), and bit for bit across forward shapes and thread counts
(``test-flash-attn-invariance``, which the unpatched kernel fails).

A missing program fails: ``make test`` builds the peers first, so on CI they are there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent  # the venv's bin directory, where `make peers` puts them


def program(name: str) -> Path:
    path = BIN / name
    assert path.is_file(), f"{path} is not built: `make peers` builds it from the patched llama.cpp"
    return path


def test_every_flash_attention_case_matches_ggml_reference_path() -> None:
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    out = subprocess.run([str(program("test-backend-ops")), "-b", "CPU", "-o", "FLASH_ATTN_EXT",
                          "-j", jobs], capture_output=True, text=True, timeout=3600)
    failed = [line for line in out.stdout.splitlines() if "FAIL" in line]
    assert out.returncode == 0 and not failed, "\n".join(failed[:20]) or out.stderr[-2000:]
    passed = re.search(r"(\d+)/(\d+) tests passed", out.stdout)
    assert passed is not None and passed[1] == passed[2], out.stdout[-2000:]
    assert int(passed[2]) > 5000  # every case the generator makes, not a filtered few


def test_rows_are_bit_identical_across_forward_shapes_and_threads() -> None:
    out = subprocess.run([str(program("test-flash-attn-invariance"))], capture_output=True,
                         text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    summary = re.search(r"(\d+)/(\d+) cases bit-identical", out.stdout)
    assert summary is not None and summary[1] == summary[2] and int(summary[2]) >= 14
