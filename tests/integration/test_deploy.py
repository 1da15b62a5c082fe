"""`ffwd serve --replicas 2` on a local Ray cluster: two replicas of the embedded model,
one CPU each, behind the same OpenAI API, routed by prefix affinity.

One cluster serves the whole module (starting it loads the model twice). The kill
test needs both replicas idle: it runs after the tests whose requests all finish,
and it ends when Ray's replacement serves. The backpressure test runs last: the
requests its clients abandon take a moment to end on the replicas.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.integration.live_server import Server
from tools.load import TOOLS

pytestmark = pytest.mark.slow

WEATHER = TOOLS[0]  # the load bench's get_weather
SYSTEM = {"role": "system", "content": "You are a concise travel assistant."}
CITIES = ("Lisbon", "Oslo", "Kyoto", "Quito")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Server]:
    # --max-queue 4: Ray counts requests still being routed as queued, so the four
    # first turns sent at once below need room for four.
    # llama.cpp (auto for the embedded GGUF on the CPU), one thread per replica.
    # --deterministic: a request gives the same ids on either replica, so streamed == plain.
    # --max-ongoing 2: each replica holds two requests (both decoding, batched), which the
    # backpressure test counts on.
    s = Server("--replicas", "2", "--replica-cpus", "1", "--max-queue", "4", "--fill", "echo",
               "--deterministic", "--max-ongoing", "2")
    try:
        _wait_for(s, "ffwd serving", 300)  # printed once every replica is running
        yield s
    finally:
        s.stop(timeout=60)


def _wait_for(s: Server, needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in s.log.read_text(errors="replace").splitlines():
            if needle in line:
                return line
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} not in the server log within {timeout} s")


def openai_client(s: Server) -> OpenAI:
    return OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(s: Server, messages: list[dict[str, Any]], **kw: Any) -> httpx.Response:
    body = {"model": "default", "messages": messages, "max_tokens": 12, "temperature": 0, **kw}
    return httpx.post(s.url + "/v1/chat/completions", json=body, timeout=120)


def turn(s: Server, messages: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    """One turn: the response body, and the conversation extended by its answer."""
    r = post(s, messages)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ffwd"]["replica"] == r.headers["x-ffwd-replica"]
    answer = {"role": "assistant", "content": body["choices"][0]["message"]["content"]}
    return body, [*messages, answer, {"role": "user", "content": "And then?"}]


def test_openai_client_unchanged(cluster: Server) -> None:
    c = openai_client(cluster)
    msgs = [{"role": "user", "content": "Count from one to five in words."}]
    whole = c.chat.completions.create(model="default", messages=msgs, max_tokens=20,
                                      temperature=0)  # type: ignore[arg-type]
    chunks = list(c.chat.completions.create(
        model="default", messages=msgs, max_tokens=20, temperature=0,  # type: ignore[arg-type]
        stream=True, stream_options={"include_usage": True},
    ))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text and text == whole.choices[0].message.content
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]

    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    kw: dict[str, Any] = dict(model="default", messages=ask, tools=[WEATHER],
                              tool_choice="required", max_tokens=60, temperature=0)
    # The grammar allows parallel calls: compare every call, streamed deltas joined per index.
    calls = c.chat.completions.create(**kw).choices[0].message.tool_calls or []
    assert calls and {x.function.name for x in calls} == {"get_weather"}  # type: ignore[union-attr]
    args: dict[int, str] = {}
    for ch in c.chat.completions.create(stream=True, **kw):
        for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            part = (d.function.arguments or "") if d.function else ""
            args[d.index] = args.get(d.index, "") + part
    assert [json.loads(a) for _, a in sorted(args.items())] == [
        json.loads(x.function.arguments) for x in calls]  # type: ignore[union-attr]


def test_the_proxy_keeps_an_idle_connection_as_long_as_responses_say(cluster: Server) -> None:
    """Serve's proxy got --keep-alive-timeout (default 120 s, not Ray's 5 s) and the
    ingress states it: a connection idle for 5.5 s is reused."""
    from ffwd.config import DEFAULT_KEEP_ALIVE
    from tools.keepalive import soak

    got = soak(cluster.url, reuses=1, gap=(5.5, 5.5))
    assert got["failed"] == 0 and got["reuses"] == 1, got
    assert got["keep_alive_header"] == f"timeout={DEFAULT_KEEP_ALIVE}"


def test_three_turn_conversation_hits_the_cache(cluster: Server) -> None:
    msgs: list[Any] = [SYSTEM, {"role": "user", "content": "Plan a day in Porto."}]
    replicas, prompts = set(), []
    for n in range(3):
        body, nxt = turn(cluster, msgs)
        usage = body["usage"]
        if n > 0:  # the whole previous prompt came from the cache, through the router
            assert usage["prompt_tokens_details"]["cached_tokens"] >= prompts[-1] - 2
        prompts.append(usage["prompt_tokens"])
        replicas.add(body["ffwd"]["replica"])
        msgs = nxt
    assert len(replicas) == 1


def test_interleaved_conversations_spread_and_stay(cluster: Server) -> None:
    convs: list[list[Any]] = [
        [SYSTEM, {"role": "user", "content": f"What should I see in {c}?"}] for c in CITIES
    ]
    homes: list[str] = [""] * len(convs)
    prompt_len = [0] * len(convs)
    start = threading.Barrier(len(convs))

    def first(i: int) -> None:  # all first turns at once: the router sees the load
        start.wait()
        body, convs[i] = turn(cluster, convs[i])
        homes[i], prompt_len[i] = body["ffwd"]["replica"], body["usage"]["prompt_tokens"]

    threads = [threading.Thread(target=first, args=(i,)) for i in range(len(convs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(homes) and len(set(homes)) == 2, homes
    for _ in range(2):  # later turns, interleaved: each goes back to its replica
        for i in range(len(convs)):
            body, convs[i] = turn(cluster, convs[i])
            assert body["ffwd"]["replica"] == homes[i]
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt_len[i] - 2
            prompt_len[i] = body["usage"]["prompt_tokens"]
    metrics = httpx.get(cluster.url + "/metrics").text
    assert re.search(r"^ffwd_route_resumed_total [1-9]", metrics, re.M), metrics


def _endless() -> dict[str, int]:
    """A logit_bias that keeps the embedded model from ending its answer."""
    from ffwd.models import load_tokenizer
    from ffwd.templates.rows import default_eos_ids

    return {str(i): -100 for i in default_eos_ids(load_tokenizer("default"))}


def _replica_pid(cluster: Server, replica: str) -> int:
    """The PID of a model replica, asked of Ray by a separate driver process."""
    found = re.search(r"Ray cluster (\S+) \(started here\)", _wait_for(cluster, "ffwd serving", 1))
    assert found, "no cluster address in the server log"
    gcs = found.group(1)
    code = (
        "import os, ray\n"
        f"ray.init(address={gcs!r}, logging_level='error')\n"
        f"a = ray.get_actor('SERVE_REPLICA::ffwd#ModelReplica#{replica}', namespace='serve')\n"
        "print(ray.get(a.__ray_call__.remote(lambda self: os.getpid())))\n"
    )
    # The cluster started with Ray's token auth (the token is in ~/.ray/auth_token).
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip().splitlines()[-1])


def test_killed_replica_fails_its_requests_cleanly_and_comes_back(cluster: Server) -> None:
    endless = _endless()
    long_ask = [{"role": "user", "content": "Write a very long story about a lighthouse."}]
    # 1. A stream that will not end by itself; the same prompt, not streamed, queues
    #    behind it on the same replica (the router follows the prefix).
    with httpx.stream("POST", cluster.url + "/v1/chat/completions", timeout=60, json={
            "model": "default", "messages": long_ask, "max_tokens": 3000, "stream": True,
            "logit_bias": endless}) as s:
        victim = s.headers["x-ffwd-replica"]
        lines = s.iter_lines()
        assert next(lines).startswith("data: ")
        queued: list[httpx.Response] = []
        t = threading.Thread(target=lambda: queued.append(
            post(cluster, long_ask, max_tokens=3000, logit_bias=endless)))
        t.start()
        # 2. Another conversation lives on the other replica.
        msgs: list[Any] = [SYSTEM, {"role": "user", "content": "Name a museum in Madrid."}]
        y1, msgs = turn(cluster, msgs)
        y2, after = turn(cluster, msgs)
        survivor = y2["ffwd"]["replica"]
        assert y1["ffwd"]["replica"] == survivor != victim
        # 3. Kill the victim's process.
        os.kill(_replica_pid(cluster, victim), signal.SIGKILL)
        # 4. Its requests end at once with OpenAI-shaped errors, not hung connections.
        rest = [line for line in lines if line]
    errors = [json.loads(x[6:])["error"] for x in rest if x.startswith('data: {"error"')]
    assert errors and errors[0]["code"] == "replica_unavailable", rest[-3:]
    assert rest[-1] == "data: [DONE]"
    t.join(60)
    assert queued and queued[0].status_code == 503
    assert queued[0].json()["error"]["code"] == "replica_unavailable"
    # 5. The other conversation goes on: same answer, its cache intact.
    again, _ = turn(cluster, msgs)
    assert again["ffwd"]["replica"] == survivor
    assert again["choices"] == y2["choices"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= (
        y2["usage"]["prompt_tokens"] - 2)
    y3, _ = turn(cluster, after)
    assert y3["ffwd"]["replica"] == survivor
    # 6. New conversations are served at once (by the survivor), and Ray brings a
    #    fresh replica up: pairs of concurrent requests find it when it is there.
    seen: set[str] = set()
    deadline = time.monotonic() + 180
    for n in range(0, 10**6, 2):  # new prompts each time: a repeated one would resume
        if seen - {victim, survivor} or time.monotonic() > deadline:
            break
        with ThreadPoolExecutor(2) as pool:
            pair = list(pool.map(lambda k: post(
                cluster, [{"role": "user", "content": f"Say a number above {k}."}]),
                range(n, n + 2)))
        assert [r.status_code for r in pair] == [200, 200]
        seen |= {r.headers["x-ffwd-replica"] for r in pair}
    assert victim not in seen
    assert seen - {survivor}, "Ray did not bring a replacement replica up within 180 s"


def test_backpressure_is_429_with_retry_after(cluster: Server) -> None:
    endless = _endless()

    async def go() -> None:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=60) as client:
            async def ask(k: int, max_tokens: int = 2000) -> httpx.Response:
                return await client.post("/v1/chat/completions", json={
                    "model": "default", "max_tokens": max_tokens, "logit_bias": endless,
                    "messages": [{"role": "user", "content": f"Tell tale {k}."}]})

            async def held() -> int:
                h = (await client.get("/health")).json()
                return int(h["on_replicas"] + h["queue_depth"])

            # 1. Two replicas take 2 requests each (--max-ongoing), four more wait at
            #    the router (--max-queue 4). One at a time: Ray counts a request that
            #    is being routed as queued, so a burst could be refused early.
            tasks = []
            for k in range(8):
                tasks.append(asyncio.create_task(ask(k)))
                for _ in range(400):
                    if await held() == k + 1:
                        break
                    await asyncio.sleep(0.05)
                assert await held() == k + 1, f"request {k} never reached a replica or the queue"
            # 2. One more is refused at once, as OpenAI refuses: 429 with Retry-After.
            r = await ask(8, max_tokens=1)
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["type"] == "rate_limit_error"
            # 3. The clients leave; their requests stop, on the replicas and in the queue.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for _ in range(600):
                if await held() == 0:
                    break
                await asyncio.sleep(0.1)
            assert await held() == 0, (await client.get("/health")).json()

    asyncio.run(go())
