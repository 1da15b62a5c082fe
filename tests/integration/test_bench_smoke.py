"""`ffwd bench --quick --limit 1` end to end on the embedded model (no timing asserted):
ffwd and llama-server processes over HTTP, transformers in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ffwd.cli import main as ffwd_main

pytestmark = pytest.mark.slow


def test_quick_bench_writes_results_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    # One thread: llama.cpp then computes a one-id decode and a batched forward alike at
    # any context (with more, past 256 ids a one-id decode splits its attention across
    # threads and rounds differently; the bench reports that as an agreement rate).
    # One speculating llama-server of the four (tests/integration/test_llama_server_spec.py
    # starts each), to keep this run short.
    systems = ["ffwd-off", "ffwd-strict", "ffwd-echo", "ffwd-echo-norecall", "llama-server",
               "llama-server:ngram-mod", "hf-generate", "hf-prompt-lookup"]
    rc = ffwd_main(["bench", "--quick", "--limit", "1", "--bfcl", "simple_python",
                    "--threads", "1", "--systems", ",".join(systems), "--out", str(out)])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    ran = results["settings"]["systems"]
    assert ran == systems and not results["skipped"]
    assert results["settings"]["backend"] == "llamacpp"  # auto: the embedded GGUF on the CPU
    env = results["environment"]
    assert "AVX" in env["llama_cpp_system_info"] and "CPU" in env["llama_server_system_info"]
    assert set(results["summary"]) == {"tools/required", "tools/auto", "echo", "prose", "agent"}
    assert "## ffwd-echo and llama.cpp's speculation" in (out / "report.md").read_text()
    assert len(results["runs"]) == len(results["settings"]["items"]) * len(ran)
    assert all(r["tokens"] > 0 and r["seconds"] >= r["first_token_seconds"] > 0
               for r in results["runs"])
    assert 0 < results["bound"]["required"] <= 1
    # Greedy on llama.cpp's Q4_1 kernels, one thread: fast-forwarding never changes the output.
    correctness = results["correctness"]
    for check in ("echo_vs_off", "echo_vs_strict", "strict_vs_off"):
        for workload, (same, n) in correctness[check].items():
            assert same == n, (check, workload)
    # Every difference from a peer is explained, not just counted.
    for peer in ("llama_server", "hf_generate"):
        differ = sum(n - same for same, n in correctness[f"off_vs_{peer}"].values())
        assert len(correctness[f"off_vs_{peer}_differences"]) == differ
    # A forced call through the strict tier parses as a call of a listed function.
    assert results["summary"]["tools/required"]["ffwd-strict"]["parse_rate"] == 1.0
    targets = {t["target"] for t in results["targets"]}
    assert "all workloads: ffwd-off vs llama-server (decode tok/s)" in targets
    assert "## Targets" in (out / "report.md").read_text()
    assert (out / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
