"""`ffwd bench` reporting from a fake results dict: summary, speedups, targets, Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ffwd.bench import report


def run(workload: str, system: str, repeat: int, tokens: int, seconds: float,
        **extra: Any) -> dict[str, Any]:
    row = {"workload": workload, "item": "a", "system": system, "repeat": repeat,
           "tokens": tokens, "seconds": seconds + 0.5, "prefill_seconds": 0.5,
           "forward_calls": tokens, "injected": 0,
           "verify_accepted": 0, "verify_rejected": 0, "parsed": None}
    return {**row, **extra}


RUNS = [
    # echo: ffwd-echo decodes the same 100 ids in a quarter of the time
    # (`run` adds 0.5 s of prefill to every row).
    *(run("echo", "ffwd-off", r, 100, s) for r, s in enumerate((10.0, 11.0, 9.0))),
    *(run("echo", "ffwd-echo", r, 100, s, forward_calls=30, injected=70, verify_accepted=70,
          verify_rejected=30) for r, s in enumerate((2.5, 2.6, 2.4))),
    *(run("echo", "hf-prompt-lookup", r, 100, 4.0) for r in range(3)),
    *(run("echo", "hf-generate", r, 100, 10.5) for r in range(3)),
    run("tools/required", "ffwd-off", 0, 40, 4.0, parsed=False),
    run("tools/required", "ffwd-strict", 0, 40, 2.0, injected=24, forward_calls=16, parsed=True),
    run("prose", "ffwd-off", 0, 100, 10.0),
    run("prose", "ffwd-echo", 0, 100, 10.2),
]


def test_summary_takes_medians_over_repeats() -> None:
    s = report.summarize(RUNS)
    off = s["echo"]["ffwd-off"]
    assert (off["seconds"], off["seconds_min"], off["seconds_max"]) == (10.5, 9.5, 11.5)
    assert off["prefill_seconds"] == 0.5
    assert off["tokens_per_s"] == pytest.approx(10.0)
    assert off["repeats"] == 3 and off["items"] == 1
    echo = s["echo"]["ffwd-echo"]
    assert echo["injected_fraction"] == pytest.approx(0.7)
    assert echo["accepted_fraction"] == pytest.approx(0.7)
    assert echo["forwards_per_token"] == pytest.approx(0.3)
    assert s["tools/required"]["ffwd-strict"]["parse_rate"] == 1.0
    assert s["tools/required"]["ffwd-strict"]["injected_fraction_calls"] == pytest.approx(0.6)
    assert s["tools/required"]["ffwd-off"]["injected_fraction_calls"] is None
    assert s["prose"]["ffwd-off"]["parse_rate"] is None


def test_summary_orders_systems_as_asked() -> None:
    s = report.summarize(RUNS, ["hf-generate", "ffwd-echo"])
    assert list(s["echo"]) == ["hf-generate", "ffwd-echo", "ffwd-off", "hf-prompt-lookup"]


def test_speedups_are_throughput_ratios_for_every_pair() -> None:
    sp = report.speedups(report.summarize(RUNS))
    assert sp["echo"]["ffwd-echo"]["ffwd-off"] == pytest.approx(4.0)
    assert sp["echo"]["ffwd-off"]["ffwd-echo"] == pytest.approx(0.25)
    assert sp["echo"]["ffwd-echo"]["hf-prompt-lookup"] == pytest.approx(1.6)
    assert "ffwd-echo" not in sp["echo"]["ffwd-echo"]


def test_targets_and_default() -> None:
    summary = report.summarize(RUNS)
    sp = report.speedups(summary)
    targets = {t["target"]: t for t in report.check_targets(summary, sp, {"required": 0.7})}
    assert targets["echo: ffwd-echo vs ffwd-off"]["met"] is True
    assert targets["echo: ffwd-echo vs hf-prompt-lookup"]["met"] is True
    assert targets["tools/required: ffwd-strict vs ffwd-off"]["met"] is True
    gap = targets["tools/required: replay bound - injected fraction (ffwd-strict)"]
    assert gap["value"] == pytest.approx(0.1) and gap["met"] is True
    assert targets["prose: ffwd-echo vs ffwd-off"]["met"] is True  # 2% slower
    overall = targets["all workloads: ffwd-off vs hf-generate (decode tok/s)"]
    assert overall["value"] == pytest.approx(10.5 / 10.0) and overall["met"] is True
    assert report.default_fill(sp)["fill"] == "echo"
    slow = [*RUNS[:-1], run("prose", "ffwd-echo", 0, 100, 10.5)]
    assert report.default_fill(report.speedups(report.summarize(slow)))["fill"] == "strict"


def test_llama_cpp_targets_against_llama_server_and_transformers() -> None:
    runs = [
        run("tools/required", "ffwd-off", 0, 40, 3.5),  # 40 ids: 3.5 s decode, 4 s in all
        run("tools/required", "ffwd-strict", 0, 40, 1.5),  # 2 s in all
        run("tools/required", "llama-server", 0, 40, 2.5),  # 3 s in all
        run("tools/required", "ffwd-off:transformers", 0, 40, 14.0),
    ]
    summary = report.summarize(runs)
    sp = report.speedups(summary)
    assert len(report.check_targets(summary, sp, {}, "transformers")) == 6  # no llama.cpp ones
    targets = {t["target"]: t for t in report.check_targets(summary, sp, {}, "llamacpp")}
    off = targets["all workloads: ffwd-off vs llama-server (decode tok/s)"]
    assert off["value"] == pytest.approx(2.5 / 3.5) and off["met"] is False
    e2e = targets["tools/required: ffwd-strict vs llama-server (end-to-end tok/s)"]
    assert e2e["value"] == pytest.approx(3.0 / 2.0) and e2e["met"] is True
    assert targets["tools/required: ffwd-strict vs ffwd-off on llama.cpp (decode tok/s)"][
        "value"] == pytest.approx(3.5 / 1.5)
    hf = targets["all workloads: ffwd-off on llama.cpp vs on transformers (decode tok/s)"]
    assert hf["value"] == pytest.approx(4.0) and hf["met"] is True


def test_missing_systems_are_not_run_rather_than_failed() -> None:
    summary = report.summarize([run("prose", "ffwd-off", 0, 10, 1.0)])
    sp = report.speedups(summary)
    assert all(t["met"] is None for t in report.check_targets(summary, sp, {}))
    assert report.default_fill(sp)["fill"] is None


def fake_results() -> dict[str, Any]:
    summary = report.summarize(RUNS)
    sp = report.speedups(summary)
    return {
        "environment": {"model": "m", "model_path": "/m.gguf", "dtype": "float32", "threads": 2,
                        "cpu": "cpu", "cpu_count": 2, "torch": "t", "transformers": "x",
                        "python": "3.11", "load_before": [0.1], "load_after": [0.2],
                        "attention": [" * plain/f16   ms per 1 id/16 ids d96: 7.7/57",
                                      "   chosen: plain/f16 (fastest)"]},
        "settings": {"command": "ffwd bench --quick", "repeats": 3},
        "skipped": {"llama-server": "llama-server runs GGUF files"},
        "summary": summary, "speedups": sp, "bound": {"required": 0.7},
        "correctness": {"echo_vs_off": {"echo": (1, 1)},
                        "off_vs_hf_generate": {"echo": (0, 1)},
                        "off_vs_hf_generate_differences": [
                            {"item": "a", "workload": "echo", "explanation": "first differs at 3"}
                        ]},
        "targets": report.check_targets(summary, sp, {"required": 0.7}),
        "default_fill": report.default_fill(sp),
    }


def test_markdown_has_every_section() -> None:
    results = fake_results()
    md = report.render_markdown(results)
    row = ("| echo | ffwd-echo | 1 | 100 | 3.00 (2.90–3.10) | 0.50 | 0.500 | 40.0 | 33.3 "
           "| 0.30 | 70% | 70% ")
    for needle in (row + "| — | 4.00x |", "## Speedups", "## Replay bound (tools)",
                   "| required | 70% | 60% | 60% |", "| ffwd-off == hf-generate | echo | 0% | 1 |",
                   "`llama-server`: llama-server runs GGUF files", "first differs at 3",
                   "Recommended default fill: **echo**", "ffwd bench --quick",
                   "```\n * plain/f16   ms per 1 id/16 ids d96: 7.7/57\n   chosen: plain/f16"):
        assert needle in md


def test_readme_section_is_rewritten_between_its_markers(tmp_path: Path) -> None:
    import doctest

    from ffwd.bench import readme

    assert doctest.testmod(readme).failed == 0
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(fake_results()))
    page = tmp_path / "README.md"
    page.write_text(f"# x\n\n{readme.START}\nold table\n{readme.END}\n\nafter\n")
    plot = tmp_path / "p.png"
    assert readme.main([str(run_dir), "--readme", str(page), "--plot", str(plot)]) == 0
    text = page.read_text()
    assert "old table" not in text and text.endswith(f"{readme.END}\n\nafter\n")
    for needle in (
        "| echo (code edits, re-quotes) | 10.0 | 40.0 (4.00×) | 25.0 (2.50×) | 9.5 (0.95×) | — |",
        "| tools, `tool_choice=required` | 10.0 | — | — | — | 20.0 (2.00×) |",
        "16.0 · 0.500 s, parse 100%", "One run of `ffwd bench --quick`", "load average 0.10 before",
        "| ffwd-echo == ffwd-off | echo | 100% | 1 |",
    ):
        assert needle in text
    assert plot.stat().st_size > 0
    with pytest.raises(ValueError, match="markers"):
        readme.replace_between("no markers here", "body")
