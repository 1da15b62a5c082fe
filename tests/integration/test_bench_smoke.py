"""`ffwd bench --quick --workload all --limit 1` end to end on the embedded model (no
timing asserted): ffwd in both modes and the native llama-server over HTTP, transformers
in process, every workload (the prefill rows and the contention row included)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ffwd.bench.systems.llama_server import native_binary
from ffwd.bench.systems.names import prefill_systems
from ffwd.cli import main as ffwd_main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(native_binary() is None, reason="no native llama-server beside this "
                       "Python (the bench's fair peer): `make peers` builds it"),
]
SYSTEMS = ["ffwd-off", "ffwd-strict", "ffwd-echo", "ffwd-echo-norecall", "ffwd-off:deterministic",
           "ffwd-echo:deterministic", "llama-server", "llama-server:ngram-mod", "hf-generate"]


def test_quick_bench_writes_results_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    # One thread, and the exact mode beside the default: under --deterministic fill never
    # changes greedy output. One speculating llama-server of the four
    # (tests/integration/test_llama_server_spec.py starts each), to keep this run short.
    rc = ffwd_main(["bench", "--quick", "--workload", "all", "--limit", "1", "--bfcl",
                    "simple_python",
                    "--threads", "1", "--systems", ",".join(SYSTEMS), "--out", str(out)])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    ran = results["settings"]["systems"]
    assert ran == SYSTEMS and not results["skipped"]
    assert results["settings"]["backend"] == "llamacpp"  # auto: the embedded GGUF on the CPU
    env = results["environment"]
    # the peer is built like the engine: the same instruction sets
    assert env["llama_server"]["kind"] == "native"
    assert env["llama_server"]["system_info"] == env["llama_cpp_system_info"]
    assert set(results["summary"]) == {"tools/required", "tools/auto", "echo", "prose", "agent",
                                       "repeat"}
    report = (out / "report.md").read_text()
    for section in ("## ffwd-echo and llama.cpp's speculation", "## Prefill", "## Contention",
                    "## Concurrency", "## Targets", "- llama-server: native"):
        assert section in report
    items = results["settings"]["items"]
    prefill = prefill_systems(ran)
    expected = sum(len(prefill if it["key"].startswith("prefill") else ran) for it in items)
    assert len(results["runs"]) == expected
    assert all(r["tokens"] > 0 and r["seconds"] >= r["first_token_seconds"] > 0
               for r in results["runs"])
    assert 0 < results["bound"]["required"] <= 1
    check_prefill(results["prefill"], prefill)
    row = results["contention"]
    assert row["system"] == "ffwd-off" and all(v > 0 for v in row["tokens_per_s"].values())
    assert set(row["vs_alone"]) == {"alone", "beside ffwd", "beside a busy loop"}
    check_correctness(results["correctness"])
    # A forced call through the strict tier parses as a call of a listed function.
    assert results["summary"]["tools/required"]["ffwd-strict"]["parse_rate"] == 1.0
    targets = {t["target"] for t in results["targets"]}
    assert "all workloads: ffwd-off vs llama-server (decode tok/s)" in targets
    assert "prefill cold:1k: ffwd-off vs llama-server (time to first token)" in targets
    assert "contention: ffwd-off beside ffwd vs alone" in targets
    assert "concurrency: a short request beside a long generation vs alone" in targets
    assert (out / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_prefill(rows: dict[str, dict[str, dict[str, Any]]], systems: list[str]) -> None:
    """One cold prompt and a three-turn conversation, on one system per engine setup; a
    warm turn takes the previous turn's prompt from the cache of the servers that keep one."""
    assert systems == ["ffwd-off", "ffwd-off:deterministic", "llama-server", "hf-generate"]
    assert list(rows) == ["cold:1k", "turn:1", "turn:2", "turn:3"]
    assert all(list(by_system) == systems for by_system in rows.values())
    for name in ("ffwd-off", "ffwd-off:deterministic", "llama-server"):
        # Cold: the flush leaves nothing of the prompt cached. ffwd's other sequences
        # (--parallel) may still start with the chat template's opening id.
        assert rows["cold:1k"][name]["cached"] <= (1 if name.startswith("ffwd") else 0)
        for turn in ("turn:2", "turn:3"):
            assert 0 < rows[turn][name]["cached"] < rows[turn][name]["prompt_tokens"]


def check_correctness(correctness: dict[str, Any]) -> None:
    # Under --deterministic fast-forwarding never changes the greedy output.
    for workload, (same, n) in correctness["echo_vs_off:deterministic"].items():
        assert same == n, workload
    # Every difference from a peer is explained, not just counted.
    for peer in ("llama_server", "hf_generate"):
        counts = correctness[f"off_vs_{peer}"]
        differ = sum(n - same for same, n in counts.values())
        assert len(correctness[f"off_vs_{peer}_differences"]) == differ
