"""`ffwd bench`'s contention row: the conditions run interleaved with their load on, the
ratios to alone, the targets, the earlier run's figure, and the other work started and
stopped (a local stand-in server, real busy-loop processes; nothing timed)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ffwd.bench import contention, report
from ffwd.bench.contention import ALONE, BESIDE_BUSY, BESIDE_FFWD
from ffwd.bench.systems import Outcome
from ffwd.bench.targets import contention_targets
from ffwd.bench.workloads import Item, contention_item


class Streaming(BaseHTTPRequestHandler):
    """Streams lines until the client goes away; counts requests and disconnects."""

    requests = 0
    gone = threading.Event()

    def do_POST(self) -> None:
        type(self).requests += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b'data: {"choices": []}\n\n')
                self.wfile.flush()
                threading.Event().wait(0.01)
        except OSError:
            type(self).gone.set()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Streaming)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_the_other_server_decodes_while_inside_and_is_let_go_after(server: str) -> None:
    Streaming.requests = 0
    Streaming.gone.clear()
    with contention.decoding_beside(server):
        assert Streaming.requests == 1  # entered once its output arrived
    assert Streaming.gone.wait(30)  # the stream was closed (the server cancels the request)


def test_a_server_that_does_not_answer_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="did not decode"), \
            contention.decoding_beside("http://127.0.0.1:9"):
        pass


def test_the_busy_loop_spins_while_inside_and_is_gone_after() -> None:
    seen: list[Any] = []
    original = contention.subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:
        seen.append(original(*args, **kwargs))
        return seen[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(contention.subprocess, "Popen", popen)
        with contention.busy_loop():
            assert len(seen) == 2 and all(p.poll() is None for p in seen)
    assert all(p.poll() is not None for p in seen)


class Fake:
    """A system whose decode speed is that of the condition it runs in."""

    name = "ffwd-off"

    def __init__(self) -> None:
        self.condition = ALONE
        self.sessions: list[str] = []

    def begin(self, session: str) -> None:
        self.sessions.append(session)

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        rate = {ALONE: 100.0, BESIDE_FFWD: 50.0, BESIDE_BUSY: 30.0}[self.condition]
        return Outcome("", [], 100, 1.0 + 100 / rate, prefill_seconds=1.0)


def test_measure_runs_every_condition_with_its_load(monkeypatch: pytest.MonkeyPatch) -> None:
    system = Fake()

    def load(condition: str) -> Any:
        def enter(*args: Any) -> Any:
            class Load:
                def __enter__(self) -> None:
                    system.condition = condition

                def __exit__(self, *exc: object) -> None:
                    system.condition = ALONE
            return Load()
        return enter

    monkeypatch.setattr(contention, "decoding_beside", load(BESIDE_FFWD))
    monkeypatch.setattr(contention, "busy_loop", load(BESIDE_BUSY))

    class Twin:
        url = "http://twin"
        stopped = False

        def __enter__(self) -> Twin:
            return self

        def __exit__(self, *exc: object) -> None:
            Twin.stopped = True

    row = contention.measure(system, contention_item(0), Twin, 3)  # type: ignore[arg-type]
    assert row["tokens_per_s"] == {ALONE: 100.0, BESIDE_FFWD: 50.0, BESIDE_BUSY: 30.0}
    assert row["vs_alone"] == {ALONE: 1.0, BESIDE_FFWD: 0.5, BESIDE_BUSY: 0.3}
    assert all(len(v) == 3 for v in row["runs"].values()) and Twin.stopped
    assert system.sessions == ["contention"] and row["item"].startswith("contention prose:")


def test_targets_say_met_missed_or_not_run() -> None:
    row = contention.summarize("ffwd-off", "x", {ALONE: [90.0], BESIDE_FFWD: [45.0],
                                                 BESIDE_BUSY: [30.0]})
    targets = {t["target"]: t for t in contention_targets(row)}
    assert targets["contention: ffwd-off beside ffwd vs alone"]["met"] is True
    busy = targets["contention: ffwd-off beside a busy loop vs alone"]
    assert busy["value"] == pytest.approx(1 / 3, abs=1e-3) and busy["met"] is False
    assert targets["contention: ffwd-off alone vs the earlier run (--before)"]["met"] is None
    before = {t["target"]: t for t in contention_targets({**row, "before": 92.0})}
    assert before["contention: ffwd-off alone vs the earlier run (--before)"]["met"] is True
    assert contention_targets({**row, "before": 100.0})[0]["met"] is False
    assert contention_targets(None) == []


def test_the_earlier_runs_alone_figure(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(
        {"contention": {"tokens_per_s": {ALONE: 88.5}}}))
    assert contention.alone_in(tmp_path) == 88.5
    (tmp_path / "results.json").write_text(json.dumps({"contention": None}))
    with pytest.raises(ValueError, match="no contention row"):
        contention.alone_in(tmp_path)


def test_the_report_and_readme_show_the_row() -> None:
    from ffwd.bench import readme
    from tests.unit.test_bench_report import fake_results

    row = {**contention.summarize("ffwd-off", "contention prose:0",
                                  {ALONE: [80.0], BESIDE_FFWD: [40.0]}), "before": 79.0}
    results = {**fake_results(), "contention": row}
    md = report.render_markdown(results)
    assert "## Contention: decode beside other work" in md
    assert "| beside ffwd | 40.0 | 0.50x |" in md and "(`--before`): 79.0 tok/s" in md
    assert "| beside ffwd | 40.0 | 0.50x |" in readme.section([results])
