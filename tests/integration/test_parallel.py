"""Many requests at once on the embedded model (``--parallel``, the default 4).

* Under ``--deterministic`` a request's ids and logprobs are the same alone and beside
  one to three others (each sequence reads only its own KV stream; the exact path's
  kernels round a row alike whatever else the forward carries).
* 16 clients at once, some of whom leave early: every request that stays gets exactly
  one complete response of its own, every request is counted once, and the server is
  idle and serving afterwards.
* A request that starts with what a running one holds (the same system prompt) copies
  that prefix from its sibling's cache instead of computing it again.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.integration.live_server import Server

pytestmark = pytest.mark.slow

WORDS = ["river", "stone", "lamp", "seven", "quiet", "north", "apple", "glass", "wind",
         "paper", "bridge", "green", "tomorrow", "engine", "salt", "market"]


def chat(url: str, content: str, max_tokens: int, key: str = "",
         **extra: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(url + "/v1/chat/completions", timeout=300, headers=headers, json={
        "model": "default", "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens, "temperature": 0, "logprobs": True, **extra})
    assert r.status_code == 200, r.text
    return dict(r.json())


def tokens(body: dict[str, Any]) -> list[tuple[str, float]]:
    """The reply's tokens with their logprobs (the logits, to the bit, in JSON floats)."""
    return [(t["token"], t["logprob"]) for t in body["choices"][0]["logprobs"]["content"]]


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def batched_forwards(url: str) -> float:
    """Model forwards so far that carried two sequences or more."""
    text = httpx.get(url + "/metrics").text
    return (metric(text, "ffwd_batch_sequences_count")
            - metric(text, 'ffwd_batch_sequences_bucket{le="1"}'))


@settings(max_examples=4, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(words=st.lists(st.sampled_from(WORDS), min_size=2, max_size=12),
       mates=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40),
                      min_size=1, max_size=3))
def test_a_request_alone_and_beside_others_gives_the_same_ids(
    exact_server: Server, words: list[str], mates: list[list[str]],
) -> None:
    url = exact_server.url
    ask = "Write a few lines about " + " ".join(words) + "."
    # Each request under a key of its own: recall keeps a key's earlier replies, and the
    # same request again under the same key would be recalled whole in a forward or two,
    # done before the others start decoding beside it.
    key = uuid.uuid4().hex[:12]
    alone = chat(url, ask, 24, key=f"{key}-alone")
    before = batched_forwards(url)
    results: dict[int, dict[str, Any]] = {}

    def run(i: int, content: str, n: int) -> None:
        results[i] = chat(url, content, n, key=f"{key}-{i}")

    threads = [threading.Thread(target=run, args=(0, ask, 24))]
    threads += [threading.Thread(target=run, args=(i + 1, "Tell a story: " + " ".join(m), 48))
                for i, m in enumerate(mates)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    beside = results[0]
    assert beside["choices"][0]["message"]["content"] == alone["choices"][0]["message"]["content"]
    assert tokens(beside) == tokens(alone)
    assert batched_forwards(url) > before  # they did share forwards


def test_sixteen_clients_some_leaving_each_get_one_response_of_their_own(server: Server) -> None:
    url = server.url
    rng = random.Random(16)
    # Each client's prompt has its own length, so a response shows whose prompt it ran.
    prompts = [f"Count the words: {' '.join(WORDS[: 1 + i])}." for i in range(16)]
    lengths = {chat(url, p, 1)["usage"]["prompt_tokens"]: i for i, p in enumerate(prompts)}
    assert len(lengths) == 16
    before = httpx.get(url + "/metrics").text
    plans = [(i, rng.random() < 0.5, rng.random() < 0.35) for i in range(16)]
    got: dict[int, list[dict[str, Any]]] = {i: [] for i in range(16)}

    def client(i: int, stream: bool, leave: bool) -> None:
        body = {"model": "default", "messages": [{"role": "user", "content": prompts[i]}],
                "max_tokens": 40, "temperature": 0.7, "seed": i, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        try:
            with httpx.Client(timeout=0.2 + rng.random() if leave else 300) as h:
                if not stream:
                    got[i].append(h.post(url + "/v1/chat/completions", json=body).json())
                    return
                with h.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    chunks = []
                    for line in r.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            chunks.append(json.loads(line[6:]))
                        if leave and len(chunks) >= 3:
                            return  # the client goes away mid-stream
                    got[i].append({"chunks": chunks})
        except httpx.TimeoutException:
            assert leave  # only a client that gives up early times out

    threads = [threading.Thread(target=client, args=plan) for plan in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for i, stream, leave in plans:
        if leave and not got[i]:
            continue
        assert len(got[i]) == 1
        body = got[i][0]
        if stream:
            chunks = body["chunks"]
            finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
            assert [f for f in finishes if f] in (["stop"], ["length"])
            usage = chunks[-1]["usage"]
        else:
            assert body["choices"][0]["finish_reason"] in ("stop", "length")
            usage = body["usage"]
        assert lengths[usage["prompt_tokens"]] == i  # its own prompt ran
    endpoint = '{endpoint="/v1/chat/completions",status="%s"}'

    def counted() -> float:  # a client's leaving reaches the server within a step or so
        after = httpx.get(url + "/metrics").text
        return sum(metric(after, "ffwd_requests_total" + endpoint % s)
                   - metric(before, "ffwd_requests_total" + endpoint % s) for s in (200, 499))

    deadline = time.monotonic() + 60
    while counted() < 16 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counted() == 16  # each request answered (or given up) exactly once
    health = httpx.get(url + "/health").json()
    assert health["queue_depth"] == 0 and health["active"] == 0
    assert metric(httpx.get(url + "/metrics").text, "ffwd_active_sequences") == 0
    chat(url, "Name a color.", 4)  # and the server goes on


def test_a_shared_system_prompt_is_copied_from_the_running_sibling(server: Server) -> None:
    url = server.url
    system = f"Session {uuid.uuid4().hex}. You are a careful assistant. " + " ".join(WORDS * 6)

    def ask(question: str, **extra: Any) -> dict[str, Any]:
        r = httpx.post(url + "/v1/chat/completions", timeout=300, json={
            "model": "default", "max_tokens": 8, "temperature": 0, **extra,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]})
        return dict(r.json())

    ask("Say yes.", max_tokens=1)  # a free sequence holds the system prompt now
    body = {"model": "default", "max_tokens": 400, "temperature": 0, "stream": True,
            "logit_bias": {"0": -100, "2": -100}, "ffwd": {"fill": "off"},
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": "Tell a long story."}]}
    with httpx.Client(timeout=300) as h, h.stream("POST", url + "/v1/chat/completions",
                                                  json=body) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: ")  # the first request is decoding
        second = ask("What is a river?")
    # Every other cache starts differently (the session id), and the sequence that held the
    # system prompt is running the story: only a copy from it saves the system part.
    usage = second["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 16
