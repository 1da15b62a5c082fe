"""`ffwd bench`'s system names (engine vs llama-server speculation mode), the systems'
sessions, and llama.cpp's speculation modes in the report and targets (no model, no
server: fakes and mocked HTTP)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from ffwd.bench import report
from ffwd.bench.run import _run_all
from ffwd.bench.systems import Outcome, with_drafts
from ffwd.bench.systems.ffwd_http import FfwdHTTP, chat_body
from ffwd.bench.systems.llama_http import LlamaServerHTTP
from ffwd.bench.systems.names import (
    ALL_SYSTEMS,
    EXTRA_SYSTEMS,
    QUICK_SYSTEMS,
    SPEC_MODES,
    SystemName,
    ffwd_settings,
    parse_system,
    prefill_systems,
)
from ffwd.bench.workloads import WORKLOADS, Item
from ffwd.cli import bench as cli_bench


def test_every_default_and_extra_name_parses_back_to_itself() -> None:
    for name in (*ALL_SYSTEMS, *EXTRA_SYSTEMS):
        assert parse_system(name).name == name
    for mode in SPEC_MODES:
        assert f"llama-server:{mode}" in ALL_SYSTEMS
    assert "llama-server:ngram-map-k4v" in EXTRA_SYSTEMS
    assert ALL_SYSTEMS.index("llama-server:ngram-mod") > ALL_SYSTEMS.index("ffwd-echo")


def test_a_variant_is_an_engine_for_ffwd_and_a_speculation_mode_for_llama_server() -> None:
    assert parse_system("ffwd-echo:llamacpp") == SystemName("ffwd-echo", engine="llamacpp")
    assert parse_system("ffwd-echo-norecall:transformers").engine == "transformers"
    spec = parse_system("llama-server:ngram-cache")
    assert (spec.engine, spec.spec) == (None, "ngram-cache")
    assert parse_system("llama-server") == SystemName("llama-server")
    kv = parse_system("ffwd-off:kv-f16")  # llama.cpp with an f16 KV cache
    assert (kv.engine, kv.kv, kv.name) == ("llamacpp", "f16", "ffwd-off:kv-f16")
    # llama.cpp's other attention path, alone or with a speculation mode.
    off = parse_system("llama-server:fa-off+ngram-mod")
    assert (off.flash, off.spec, off.name) == ("off", "ngram-mod", "llama-server:fa-off+ngram-mod")
    assert parse_system("llama-server:fa-off") == SystemName("llama-server", flash="off")
    # the same server without patches/llama.cpp: what a user of llama.cpp runs
    up = parse_system("llama-server:upstream")
    assert (up.upstream, up.spec, up.flash, up.name) == (True, None, None, "llama-server:upstream")
    assert prefill_systems(["llama-server", "llama-server:upstream"]) == [
        "llama-server", "llama-server:upstream"]  # it prefills on another kernel
    for bad in ("llama-server:upstream+ngram-mod", "ffwd-off:upstream",
                "llama-server:llamacpp", "ffwd-off:ngram-mod", "hf-generate:transformers",
                "llama-server:ngram-nope", "llama-server:", "nope", "ffwd-off:cuda",
                "llama-server:kv-f16", "ffwd-off:kv-f32", "llama-server:fa-off+",
                "llama-server:fa-off+ngram-nope", "llama-server:ngram-mod+fa-off",
                "ffwd-off:fa-off"):
        with pytest.raises(ValueError):
            parse_system(bad)


def test_ffwd_settings_of_each_served_system() -> None:
    assert ffwd_settings("ffwd-off") == ("off", True, True)
    assert ffwd_settings("ffwd-strict-nogrammar") == ("strict", False, True)
    assert ffwd_settings("ffwd-echo-norecall") == ("echo", True, False)
    with pytest.raises(ValueError):
        ffwd_settings("llama-server")
    item = Item("prose", "p", [{"role": "user", "content": "hi"}], 8)
    assert chat_body(item, "echo", recall=False)["ffwd"] == {
        "fill": "echo", "grammar": True, "recall": False}
    assert "recall" not in chat_body(item, "echo")["ffwd"]


def test_cli_accepts_speculation_modes_and_lists_them_in_help() -> None:
    got = cli_bench._system_names("ffwd-echo, llama-server:ngram-mod,ffwd-echo")
    assert got == ["ffwd-echo", "llama-server:ngram-mod"]
    with pytest.raises(ValueError, match="speculation mode"):
        cli_bench._system_names("llama-server:transformers")
    with pytest.raises(ValueError, match="engine"):
        cli_bench._system_names("ffwd-off:ngram-mod")
    parser = argparse.ArgumentParser()
    cli_bench.add_arguments(parser)
    help_of = {a.dest: a.help or "" for a in parser._actions}
    for mode in (*SPEC_MODES, "ngram-map-k4v"):
        assert f"llama-server:{mode}" in help_of["systems"]
    assert "agent" in help_of["seed"] and parser.parse_args([]).systems is None
    assert ", ".join(QUICK_SYSTEMS) in help_of["systems"]


def test_cli_takes_several_workloads_in_run_order_and_names_an_unknown_one() -> None:
    parser = argparse.ArgumentParser()
    cli_bench.add_arguments(parser)
    assert parser.parse_args(["--workload", "repeat, prose,tools"]).workload == (
        "tools", "prose", "repeat")
    assert parser.parse_args(["--workload", "prose,all"]).workload == WORKLOADS
    assert parser.parse_args([]).workload is None  # all, or --quick's first look
    with pytest.raises(argparse.ArgumentTypeError, match="prosee"):
        cli_bench.workload_list("tools,prosee")


def test_draft_counts_become_verified_and_accepted_ids() -> None:
    o = Outcome("x", [], 10, 1.0)
    got = with_drafts(o, {"draft_n": 12, "draft_n_accepted": 9, "predicted_n": 10})
    assert (got.injected, got.verify_accepted, got.verify_rejected) == (9, 9, 3)
    assert with_drafts(o, {"predicted_n": 10}) == o  # no speculation: unchanged


class FakeServer:
    def __init__(self, url: str) -> None:
        self.url, self.stopped = url, False

    def stop(self) -> None:
        self.stopped = True


def mock_client(seen: list[tuple[str, dict[str, str]]]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), dict(request.headers)))
        return httpx.Response(200, json={"content": "", "tokens": [], "stop": True})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_a_speculating_llama_server_restarts_for_a_new_session_once_used() -> None:
    started: list[FakeServer] = []

    def start() -> Any:
        started.append(FakeServer(f"http://127.0.0.1:{9000 + len(started)}"))
        return started[-1]

    seen: list[tuple[str, dict[str, str]]] = []
    peer = LlamaServerHTTP(start, decoder=None, spec="ngram-mod")  # type: ignore[arg-type]
    peer.client = mock_client(seen)
    assert peer.name == "llama-server:ngram-mod"
    peer.begin("repeat-0")  # nothing ran yet: the fresh process is kept
    assert len(started) == 1
    peer.used = True
    peer.begin("repeat-1")
    assert len(started) == 2 and started[0].stopped and peer.url.endswith(":9001")
    assert seen and seen[-1][0] == "http://127.0.0.1:9001/completion"  # warmed, untimed
    plain = LlamaServerHTTP(start, decoder=None)  # type: ignore[arg-type]
    plain.used = True
    plain.begin("repeat-1")  # no speculation: nothing outlives a request
    assert len(started) == 3 and plain.name == "llama-server"


def test_ffwd_systems_present_a_key_per_system_and_session() -> None:
    a = FfwdHTTP("http://x", "echo", "ffwd-echo")
    b = FfwdHTTP("http://x", "echo", "ffwd-echo-norecall", recall=False)
    keys = set()
    for s in (a, b):
        for session in ("repeat-0", "repeat-1"):
            s.begin(session)
            keys.add(s.headers["Authorization"])
    assert len(keys) == 4 and all(k.startswith("Bearer ") for k in keys)


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def begin(self, session: str) -> None:
        self.log.append(f"{self.name} begin {session}")

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        self.log.append(f"{self.name} run {item.id}")
        return Outcome("", [], 1, 0.1)


def test_each_workload_of_each_repeat_begins_a_session_of_every_system() -> None:
    # tools/auto runs the prompts tools/required just ran: a session of its own keeps a
    # system from drafting one workload's replies out of another's
    log: list[str] = []
    items = [Item("tools/required", "a", [], 4), Item("tools/auto", "a", [], 4),
             Item("tools/auto", "b", [], 4)]
    systems: Sequence[Any] = [Recorder("S", log), Recorder("T", log)]
    runs, _ = _run_all(items, systems, 2, {it.key: [1] for it in items})
    assert len(runs) == 12
    begins = [i for i, line in enumerate(log) if "begin repeat" in line]
    assert [log[i] for i in begins] == [
        f"{s} begin repeat-{r}-{w}" for r in (0, 1) for w in ("tools/required", "tools/auto")
        for s in "ST"]
    assert log[:4] == ["S begin warm-up", "S run a", "T begin warm-up", "T run a"]
    assert sum("run" in line for line in log[begins[1]:begins[2]]) == 2  # required's runs
    assert sum("run" in line for line in log[begins[3]:begins[4]]) == 4  # auto's, a and b


def spec_runs() -> list[dict[str, Any]]:
    def row(workload: str, system: str, seconds: float, **extra: Any) -> dict[str, Any]:
        return {"workload": workload, "item": "a", "system": system, "repeat": 0,
                "tokens": 100, "seconds": seconds + 0.5, "prefill_seconds": 0.5,
                "forward_calls": None, "injected": 0, "verify_accepted": 0,
                "verify_rejected": 0, "parsed": None, **extra}

    return [
        row("echo", "ffwd-off", 10.0), row("agent", "ffwd-off", 10.0),
        row("echo", "ffwd-echo", 5.0, injected=60, verify_accepted=60, verify_rejected=20,
            origins={"echo": 60}),
        row("agent", "ffwd-echo", 8.0, injected=50, verify_accepted=50, verify_rejected=10,
            origins={"echo": 20, "recall": 30}),
        row("agent", "ffwd-echo-norecall", 9.0, origins={"echo": 20}),
        row("echo", "llama-server:ngram-mod", 4.0, injected=70, verify_accepted=70,
            verify_rejected=30),
        row("echo", "llama-server:ngram-simple", 6.0),
        row("agent", "llama-server:ngram-simple", 10.0),
    ]


def test_speculation_modes_in_the_report_beside_ffwd_echo() -> None:
    summary = report.summarize(spec_runs())
    assert summary["agent"]["ffwd-echo"]["injected_by_origin"] == {"echo": 0.2, "recall": 0.3}
    assert summary["echo"]["llama-server:ngram-mod"]["accepted_fraction"] == pytest.approx(0.7)
    lines = report.peer_sections(summary)
    header = next(line for line in lines if line.startswith("| workload | ffwd-echo"))
    assert "llama-server:ngram-mod" in header and "llama-server:ngram-simple" in header
    echo_row = next(line for line in lines if line.startswith("| echo | 20.0"))
    assert "25.0 (70%)" in echo_row and "0.80x (llama-server:ngram-mod)" in echo_row
    agent_row = next(line for line in lines if line.startswith("| agent | 12.5"))
    assert "1.25x (llama-server:ngram-simple)" in agent_row and "—" in agent_row
    assert "| agent | ffwd-echo | 20% | 30% |" in lines
    table = report.main_table(summary, report.speedups(summary))
    assert any("| echo | llama-server:ngram-mod |" in line for line in table)


def test_issue_21_targets_on_llama_cpp() -> None:
    summary = report.summarize(spec_runs())
    sp = report.speedups(summary)
    targets = {t["target"]: t for t in report.check_targets(summary, sp, {}, "llamacpp")}
    assert targets["echo: ffwd-echo vs ffwd-off on llama.cpp (decode tok/s)"]["value"] == 2.0
    low = targets["every workload: ffwd-echo vs ffwd-off on llama.cpp (lowest: agent)"]
    assert low["value"] == pytest.approx(1.25) and low["met"] is True
    best = targets["echo: ffwd-echo vs the best llama-server speculation "
                   "(llama-server:ngram-mod)"]
    assert best["value"] == pytest.approx(0.8) and best["met"] is False
    recall = targets["agent: ffwd-echo vs ffwd-echo-norecall (recall's gain)"]
    assert recall["value"] == pytest.approx(9 / 8) and recall["met"] is True
    assert not any("speculation" in t["target"]
                   for t in report.check_targets(summary, sp, {}, "transformers"))
