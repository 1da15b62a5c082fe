"""`ffwd bench --quick --limit 1` end to end on the embedded model (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ffwd.cli import main as ffwd_main

pytestmark = pytest.mark.slow


def test_quick_bench_writes_results_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    rc = ffwd_main(["bench", "--quick", "--limit", "1", "--bfcl", "simple_python",
                    "--out", str(out)])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    ran = results["settings"]["systems"]
    assert {"ffwd-off", "ffwd-strict", "ffwd-echo", "hf-generate", "hf-prompt-lookup"} <= set(ran)
    assert set(ran) | set(results["skipped"]) == {
        "ffwd-off", "ffwd-strict", "ffwd-echo", "hf-generate", "hf-prompt-lookup",
        "llamacpp", "llamacpp-lookup",
    }
    assert set(results["summary"]) == {"tools/required", "tools/auto", "echo", "prose"}
    assert len(results["runs"]) == len(results["settings"]["items"]) * len(ran)
    assert results["environment"]["dtype"] == "float32"
    assert 0 < results["bound"]["required"] <= 1
    # Greedy float32: fast-forwarding never changes what the model says.
    correctness = results["correctness"]
    for check in ("echo_vs_off", "echo_vs_strict", "strict_vs_off"):
        for workload, (same, n) in correctness[check].items():
            assert same == n, (check, workload)
    # A forced call through the strict tier parses as a call of a listed function.
    assert results["summary"]["tools/required"]["ffwd-strict"]["parse_rate"] == 1.0
    assert "## Targets" in (out / "report.md").read_text()
    assert (out / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
