"""The bench's concurrency row without servers: clients, the figures and the targets."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from ffwd.bench import concurrency, concurrency_report
from ffwd.bench.systems import Outcome, llama_server
from ffwd.bench.workloads import Item


class Counting:
    """A system that answers each item with as many ids as its index, after `gate`."""

    name = "fake"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (item, thread)
        self.lock = threading.Lock()

    def begin(self, session: str) -> None:
        pass

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        with self.lock:
            self.seen.append((item.id, threading.current_thread().name))
        return Outcome("", [], int(item.id.split(":")[1]) + 1, 0.5)


@pytest.mark.parametrize("clients", [1, 2, 4, 8])
def test_every_request_of_a_round_runs_once_spread_over_the_clients(clients: int) -> None:
    items = concurrency.interleave(concurrency.short_items("t"), concurrency.long_items("t", 9))
    system = Counting()
    got = concurrency.run_clients(system, items, clients, lambda it: [1], group=2)
    assert sorted(i for i, _ in system.seen) == sorted(it.id for it in items)
    assert len({t for _, t in system.seen}) == min(clients, len(items))
    kinds: dict[str, set[str]] = {}
    for item, thread in system.seen:
        kinds.setdefault(thread, set()).add(item.split(":")[0])
    if clients < len(items):  # every client sends short and long requests
        assert all(k == {"short", "long"} for k in kinds.values())
    assert got["ids"] == sum(int(it.id.split(":")[1]) + 1 for it in items)
    assert len(got["latency"]) == len(items) and len(got["short"]) == concurrency.SHORT


def test_each_round_s_requests_are_its_own() -> None:
    a, b = concurrency.short_items("r0"), concurrency.short_items("r1")
    assert all(x.messages != y.messages for x, y in zip(a, b, strict=True))
    echo = concurrency.tagged([Item("echo", "e", [{"role": "user", "content": "hi"}], 8)], "r2")
    assert echo[0].messages[0]["content"] == "(r2) hi" and echo[0].warm


def rounds(rate: float, latency: float) -> list[dict[str, Any]]:
    return [{"wall": 10.0, "ids": rate * 10, "latency": [latency] * 8, "short": [latency / 4]}]


def row(ours: float, peer: float, one: float) -> dict[str, Any]:
    def system(rate: float, alone: float, beside: float, echo: float = 0.0) -> dict[str, Any]:
        return {"alone": [alone], "beside": [beside],
                "mix": {c: rounds(rate, 40 / rate) for c in ("1", "2", "4", "8")},
                "echo": {"1": rounds(echo or rate, 1.0), "4": rounds(echo or rate, 1.0)}}

    return {"systems": ["ffwd-echo", "ffwd-off", "llama-server:fa-off"], "clients": [1, 2, 4, 8],
            "load": [[1.0, 1.0, 1.0]], "ffwd_path": "gguf-kv-f16-noflash",
            "sizes": {"short": 24, "long": 256, "beside": 1000},
            "parallel": {"1": {"ffwd-echo": system(one, 0.4, 2.0)},
                         "4": {"ffwd-echo": system(ours, 0.4, 0.7, echo=1.5 * ours),
                               "ffwd-off": system(ours, 0.4, 0.7),
                               "llama-server:fa-off": system(peer, 0.3, 0.5)}}}


def test_the_targets_read_the_widest_parallel_against_llama_server_on_ffwd_s_path() -> None:
    got = {t["target"]: t for t in concurrency_report.targets(row(150.0, 140.0, 150.0))}
    agg = got["concurrency: 4 clients, ffwd tokens_per_s vs llama-server:fa-off -np 4"]
    assert agg["value"] == pytest.approx(150 / 140, abs=1e-3) and agg["met"]
    assert got["concurrency: 4 clients, ffwd p50 vs llama-server:fa-off -np 4"]["met"]
    short = got["concurrency: a short request beside a long generation vs alone"]
    assert short["value"] == pytest.approx(1.75) and short["met"]
    assert got["concurrency: 1 client at --parallel 4 vs --parallel 1"]["value"] == 1.0
    assert got["concurrency: echo at 4 clients, ffwd-echo vs ffwd-off"]["met"]
    slow = {t["target"]: t for t in concurrency_report.targets(row(100.0, 140.0, 150.0))}
    assert not slow["concurrency: 1 client at --parallel 4 vs --parallel 1"]["met"]
    lines = "\n".join(concurrency_report.markdown(row(150.0, 140.0, 150.0)))
    assert "| ffwd-echo | 4 | 150.00 |" in lines and "`--parallel 4`" in lines


def test_llama_server_gets_its_slots_each_with_the_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setattr(llama_server, "native_binary", lambda upstream=False: fake)
    cmd = llama_server.command("m.gguf", 8123, 2, 8192, 512, None, "off", 4)
    assert cmd[cmd.index("--parallel") + 1] == "4"
    assert cmd[cmd.index("--ctx-size") + 1] == str(4 * 8192)  # split among the slots
    assert "--no-kv-unified" in cmd  # a KV stream per slot, as ffwd's sequences
