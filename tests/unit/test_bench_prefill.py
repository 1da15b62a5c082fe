"""`ffwd bench`'s prefill rows: the prompts (sizes, cold and warm turns), who runs them,
the cache each system keeps or drops, the time-to-first-token table and its target."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import httpx
import pytest

from ffwd.bench import latency, report
from ffwd.bench.run import _run_all
from ffwd.bench.systems import Outcome
from ffwd.bench.systems.ffwd_http import FfwdHTTP
from ffwd.bench.systems.llama_http import LlamaServerHTTP
from ffwd.bench.targets import first_token_targets
from ffwd.bench.workloads import ECHO_MODULES, Item, select
from ffwd.bench.workloads.prefill import FULL, MARKUP, QUICK, corpus, prefill_items, take


def count(text: str) -> int:
    """A stand-in tokenizer: an id per four characters."""
    return len(text) // 4


def test_take_finds_the_longest_run_of_lines_that_fits() -> None:
    lines = ["abcd\n"] * 10  # 5 characters a line
    assert take(lines, 0, 5, count) == 4  # 20 characters, 5 ids; 5 lines would be 6
    assert take(lines, 8, 100, count) == 10  # the rest, when all of it fits
    assert take(lines, 0, 5, count, lambda s: "12345678" + s) == 3  # the message counts
    with pytest.raises(ValueError, match="no source left"):
        take(lines, 0, 0, count)


def test_cold_prompts_have_their_sizes_and_share_no_source() -> None:
    items = prefill_items(count, 8192, quick=False, modules=ECHO_MODULES)
    cold = [it for it in items if it.kind == "cold"]
    assert [it.id for it in cold] == ["cold:1k", "cold:2k", "cold:4k", "cold:8k"]
    for it, size in zip(cold, FULL.cold, strict=True):
        ids = count(it.messages[0]["content"])
        assert not it.warm and not it.tools and it.max_tokens == FULL.max_tokens
        # about the size asked, and the largest leaves room for the output in the context
        assert size * 0.9 < ids + MARKUP <= min(size, 8192 - FULL.max_tokens)
    sources = [it.messages[0]["content"].split("```python\n")[1] for it in cold]
    assert len({s[:200] for s in sources}) == len(sources)


def test_the_conversation_grows_toward_the_context_each_turn_warm_but_the_first() -> None:
    items = prefill_items(count, 8192, quick=False, modules=ECHO_MODULES)
    turns = [it for it in items if it.kind == "turn"]
    assert len(turns) >= 6 and [it.id for it in turns[:2]] == ["turn:1", "turn:2"]
    assert [it.warm for it in turns] == [False] + [True] * (len(turns) - 1)
    for before, after in pairwise(turns):
        # the next prompt extends the last one: its prefix is what the system cached
        assert after.messages[: len(before.messages)] == before.messages
        assert after.messages[len(before.messages)]["role"] == "assistant"
    total = sum(count(m["content"]) for m in turns[-1].messages)
    assert 8192 * 0.75 < total < 8192 - FULL.max_tokens


def test_an_agent_turn_is_deep_in_the_conversation_and_writes_a_long_reply() -> None:
    items = prefill_items(count, 8192, quick=False, modules=ECHO_MODULES)
    agent = next(it for it in items if it.id.startswith("agent:"))
    assert agent.id == "agent:4" and agent.warm and agent.max_tokens == FULL.agent_output
    assert "Rewrite this code" in agent.messages[-1]["content"]
    depth = sum(count(m["content"]) for m in agent.messages)
    new = count(agent.messages[-1]["content"])
    assert 3000 < depth < 5500 and 0.7 * FULL.turn < new <= FULL.turn


def test_quick_is_a_small_slice_and_select_needs_a_tokenizer() -> None:
    items = select(("prefill",), 1, quick=True, count=count, context=8192)
    assert [it.id for it in items] == ["cold:1k", "turn:1", "turn:2", "turn:3"]
    assert all(it.workload == "prefill" for it in items) and len(QUICK.cold) == 1
    with pytest.raises(ValueError, match="count"):
        select(("prefill",), 1)
    assert corpus(["textwrap"])[0] == "# file: textwrap.py\n"


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def begin(self, session: str) -> None:
        pass

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        self.log.append(f"{self.name} {item.id}")
        return Outcome("", [], 1, 0.1)


def test_prefill_rows_run_one_system_per_engine_setup() -> None:
    log: list[str] = []
    names = ["ffwd-off", "ffwd-echo", "ffwd-echo:deterministic", "llama-server",
             "llama-server:ngram-mod"]
    systems: Sequence[Any] = [Recorder(n, log) for n in names]
    items = [Item("prefill", "cold:1k", [], 4, kind="cold"), Item("prose", "p", [], 4)]
    runs, _ = _run_all(items, systems, 1, {it.key: [1, 2, 3] for it in items})
    ran = {r["system"] for r in runs if r["workload"] == "prefill"}
    assert ran == {"ffwd-off", "ffwd-echo:deterministic", "llama-server"}
    assert {r["system"] for r in runs if r["workload"] == "prose"} == set(names)
    assert all(r["prompt_tokens"] == 3 for r in runs)


def test_a_warm_turn_keeps_the_cache_and_a_cold_prompt_drops_it() -> None:
    posts: list[tuple[str, dict[str, Any]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        posts.append((request.url.path, body))
        if request.url.path == "/v1/completions":  # the flush
            return httpx.Response(200, json={})
        if request.url.path == "/completion":  # llama-server
            done = {"tokens": [5], "stop": True, "timings": {"cache_n": 7}}
            return httpx.Response(200, text=f"data: {json.dumps(done)}\n\n")
        final = {"choices": [], "usage": {"completion_tokens": 1,
                                          "prompt_tokens_details": {"cached_tokens": 9}},
                 "ffwd": {"seconds": 1.0, "prefill_seconds": 0.5, "forward_calls": 2,
                          "stats": {"injected": 0, "verify_accepted": 0,
                                    "verify_rejected": 0}}}
        delta = {"choices": [{"delta": {"content": "x"}}]}
        return httpx.Response(200, text=f"data: {json.dumps(delta)}\n\n"
                                        f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n")

    client = httpx.Client(transport=httpx.MockTransport(handler))
    ffwd = FfwdHTTP("http://x", "off", "ffwd-off")
    ffwd.client = client
    cold, warm = Item("prefill", "a", [], 4), Item("prefill", "b", [], 4, warm=True)
    assert ffwd.run(cold, []).cached == 9
    ffwd.run(warm, [])
    assert [p for p, _ in posts] == ["/v1/completions", "/v1/chat/completions",
                                     "/v1/chat/completions"]  # no flush before the warm one

    class Server:
        url = "http://y"

    peer = LlamaServerHTTP(lambda: Server(), decoder=Decoder())  # type: ignore[arg-type, return-value]
    peer.client = client
    posts.clear()
    assert peer.run(cold, [1]).cached == 7
    peer.run(warm, [1])
    assert [b["cache_prompt"] for _, b in posts] == [False, True]


class Decoder:
    """Passes ids through as the outcome (what `Decoder.finish` returns, minus parsing)."""

    def finish(self, item: Item, ids: list[int], seconds: float, prefill: float,
               calls: int | None) -> Outcome:
        return Outcome("", [], len(ids), seconds, prefill, prefill, calls, token_ids=ids)


def prefill_run(item: str, system: str, repeat: int, first: float, cached: int | None = None,
                kind: str = "cold", ids: int = 1000) -> dict[str, Any]:
    return {"workload": "prefill", "item": item, "kind": kind, "system": system,
            "repeat": repeat, "prompt_tokens": ids, "cached": cached,
            "first_token_seconds": first}


RUNS = [
    *(prefill_run("cold:1k", "ffwd-off", r, s) for r, s in enumerate((1.0, 1.2, 1.1))),
    *(prefill_run("cold:1k", "llama-server", r, s) for r, s in enumerate((1.0, 1.0, 1.0))),
    prefill_run("cold:2k", "ffwd-off", 0, 2.0, ids=2000),
    prefill_run("cold:2k", "llama-server", 0, 2.0, ids=2000),
    prefill_run("cold:2k", "ffwd-off:deterministic", 0, 3.0, ids=2000),
    prefill_run("turn:2", "ffwd-off", 0, 0.3, cached=1500, kind="turn", ids=2000),
    prefill_run("turn:2", "llama-server", 0, 0.4, cached=1500, kind="turn", ids=2000),
    {"workload": "prose", "item": "p", "system": "ffwd-off", "repeat": 0},
]


def test_latency_takes_the_median_first_token_time_per_prompt_and_system() -> None:
    s = latency.summarize(RUNS)
    assert list(s) == ["cold:1k", "cold:2k", "turn:2"]  # prose is not a prefill row
    off = s["cold:1k"]["ffwd-off"]
    assert off["first_token_seconds"] == pytest.approx(1.1) and off["repeats"] == 3
    assert off["ids_per_s"] == pytest.approx(1000 / 1.1) and not off["warm"]
    assert s["turn:2"]["ffwd-off"]["cached"] == 1500 and s["turn:2"]["ffwd-off"]["warm"]
    assert latency.ratio(s["cold:2k"], "ffwd-off:deterministic", "ffwd-off") == 1.5
    assert latency.ratio(s["turn:2"], "ffwd-off:deterministic", "ffwd-off") is None
    assert latency.default_ffwd(["llama-server", "ffwd-off:deterministic", "ffwd-off"]) == (
        "ffwd-off")


def test_latency_table_sets_modes_and_peers_side_by_side() -> None:
    lines = latency.markdown(latency.summarize(RUNS))
    assert lines[0] == ("| prompt | ids | ffwd-off | llama-server | ffwd-off:deterministic | "
                        "ffwd-off / llama-server | ffwd-off:deterministic / llama-server |")
    assert "| cold 1k | 1,000 | 1.10 s (909/s) | 1.00 s (1,000/s) | — | 1.10x | — |" in lines
    assert any(line.startswith("| turn 2 | 2,000 | 0.30 s (500 new) | 0.40 s (500 new)")
               for line in lines)
    assert latency.markdown({}) == []


def test_an_agent_turn_is_compared_whole_with_each_llama_server() -> None:
    def whole(system: str, first: float, seconds: float) -> dict[str, Any]:
        return {**prefill_run("agent:4", system, 0, first, cached=3000, kind="turn", ids=4000),
                "seconds": seconds, "tokens": 200, "item": "agent:4"}

    s = latency.summarize([whole("ffwd-off", 6.0, 9.0), whole("llama-server", 5.0, 12.0),
                           whole("llama-server:fa-off", 5.5, 9.0)])
    rows = s["agent:4"]
    assert latency.ratio(rows, "ffwd-off", "llama-server") == pytest.approx(0.75)
    assert latency.ratio(rows, "ffwd-off", "llama-server:fa-off") == pytest.approx(1.0)
    lines = latency.markdown(s)
    assert lines[0].endswith("| ffwd-off / llama-server | ffwd-off / llama-server:fa-off |")
    assert lines[2].startswith("| agent 4 | 4,000 | 9.00 s whole, 200 ids (6.00 s to the first)")
    assert lines[2].endswith("| 0.75x | 1.00x |")
    met = {t["target"]: t["met"] for t in first_token_targets(s)}
    assert met == {"prefill agent:4: ffwd-off vs llama-server (the whole turn)": True,
                   "prefill agent:4: ffwd-off vs llama-server:fa-off (the whole turn)": True}


def test_first_token_target_per_cold_prompt() -> None:
    targets = {t["target"]: t for t in first_token_targets(latency.summarize(RUNS))}
    one = targets["prefill cold:1k: ffwd-off vs llama-server (time to first token)"]
    assert one["value"] == pytest.approx(1.1) and one["met"] is False
    assert targets["prefill cold:2k: ffwd-off vs llama-server (time to first token)"]["met"]
    assert not any("turn" in name for name in targets)  # warm turns are shown, not targets
    alone = latency.summarize([r for r in RUNS if r.get("system") != "llama-server"])
    assert all(t["met"] is None for t in first_token_targets(alone))


def test_the_report_has_the_prefill_section() -> None:
    from tests.unit.test_bench_report import fake_results

    results = {**fake_results(), "prefill": latency.summarize(RUNS)}
    md = report.render_markdown(results)
    assert "## Prefill: time to first token" in md and "| cold 2k | 2,000 |" in md
