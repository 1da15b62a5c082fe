"""The ``llama-server`` systems: llama.cpp's own server over HTTP, sent ffwd's prompt ids."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx

from ffwd.bench.systems import FLUSH_PROMPT, Decoder, Outcome, http_client, sse, with_drafts
from ffwd.bench.systems.names import LLAMA_SERVER
from ffwd.bench.systems.servers import ChildServer
from ffwd.bench.workloads import Item


class LlamaServerHTTP:
    """llama.cpp's server: ``/completion`` with ffwd's prompt ids, greedy, streamed;
    with `spec`, one of its draft-free speculation modes (``ngram-mod``, ...).

    `start` starts the server process (again on each `begin` where the mode keeps
    state across requests); `close` stops it.
    """

    def __init__(
        self, start: Callable[[], ChildServer], decoder: Decoder, spec: str | None = None,
        name: str | None = None,
    ) -> None:
        self.start, self.decoder, self.spec = start, decoder, spec
        self.name = name or (f"{LLAMA_SERVER}:{spec}" if spec else LLAMA_SERVER)
        self.client = http_client()
        self.server = start()
        self.used = False  # whether a request ran since the process started

    @property
    def url(self) -> str:
        return self.server.url

    def begin(self, session: str) -> None:
        if self.spec is None or not self.used:
            return  # nothing outlives a request without speculation (no prompt cache)
        self.used = False
        self.server.stop()
        self.server = self.start()
        # A fresh process's first forward costs extra; pay it outside the timings.
        self.client.post(self.url + "/completion",
                         json={"prompt": FLUSH_PROMPT, "n_predict": 1, "cache_prompt": False})

    def close(self) -> None:
        self.server.stop()

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        self.used = True
        body = {"prompt": prompt_ids, "n_predict": item.max_tokens, "temperature": 0.0,
                "stream": True, "return_tokens": True, "cache_prompt": item.warm}
        out: list[int] = []
        first: float | None = None
        timings: dict[str, Any] = {}
        stopped_early = False
        t0 = time.perf_counter()
        try:
            for chunk in sse(self.client, self.url + "/completion", body):
                if chunk.get("tokens"):
                    first = first or time.perf_counter()
                    out += chunk["tokens"]
                timings = chunk.get("timings") or timings
                if item.single_call and self.decoder.has_call(item, out):
                    stopped_early = not chunk.get("stop")
                    break
        except httpx.TransportError as exc:  # the process died: say why
            raise RuntimeError(f"{self.name} on {item.key}: {exc} (exit status "
                               f"{self.server.proc.poll()}); its log ends:\n"
                               f"{self.server.tail()}") from exc
        seconds = time.perf_counter() - t0
        if stopped_early:
            # The server may still be generating for the closed stream: wait it out
            # (one slot, so a one-id request returns only once it is free).
            self.client.post(self.url + "/completion",
                             json={"prompt": prompt_ids[:1], "n_predict": 1, "cache_prompt": False})
        o = self.decoder.finish(item, out, seconds, (first or t0) - t0, None)
        cached = timings.get("cache_n")
        return with_drafts(replace(o, cached=cached if isinstance(cached, int) else None),
                           timings)
