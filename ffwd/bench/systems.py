"""The systems `ffwd bench` compares, each behind ``run(item, prompt_ids) -> Outcome``.

* ``ffwd-off``, ``ffwd-strict``, ``ffwd-echo``: streamed chat requests to an
  ``ffwd serve`` process (`ffwd.bench.servers`), timed by the client, so the
  serving path (HTTP, template, tool rows, parsing) is in every figure. A
  bare name runs on the bench's ``--backend``; ``ffwd-off:transformers`` (or
  ``:llamacpp``) names the engine (`ffwd.bench.names`). ``ffwd-off`` sends a
  forced call (``tool_choice=required``) as ``auto``: the same prompt, decoded
  plainly, where the server would otherwise force the call through the strict
  tier, and without the grammar. ``ffwd-echo-norecall`` is ``ffwd-echo`` with
  ``"ffwd": {"recall": false}``: echo without the index of earlier requests'
  outputs. ``ffwd-strict-nogrammar`` (not run by default) is ``ffwd-strict``
  with ``"ffwd": {"grammar": false}``: what the grammar adds to the strict tier.
* ``llama-server``: llama.cpp's own server on the same GGUF, sent the very
  prompt ids ffwd renders (``/completion`` takes ids), greedy, the same
  ``max_tokens``, stopping at its end-of-generation ids.
  ``llama-server:ngram-mod`` (``:ngram-simple``, ``:ngram-map-k``,
  ``:ngram-cache``; ``:ngram-map-k4v`` not by default) is the same server with
  that draft-free speculation mode on; the ids it drafted and kept (its
  ``timings.draft_n`` and ``draft_n_accepted``) count as verified and accepted.
* ``hf-generate``, ``hf-prompt-lookup``: transformers' ``model.generate``
  in this process (greedy; the second with ``prompt_lookup_num_tokens=10``;
  `ffwd.bench.hf_generate`).

Every system starts from an empty cache and stops at an end id, at the item's
``max_tokens``, or (``item.single_call``) once its output holds a complete
call; the client parses each output the way the service does. What outlives
a request is scoped to a session (`System.begin`, one per repeat): an ffwd
system's requests present an API key of their own per session, so recall
copies only from that system's earlier outputs in that repeat, and a
speculating llama-server restarts (``ngram-mod``'s pool and ``ngram-map-k``'s
map outlive a request). Timings:
``seconds`` is the whole request; ``first_token_seconds`` until the first
output reached the client; ``prefill_seconds`` until the server started
decoding (ffwd: the request minus its reported decode time; the others: the
first output).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import httpx

from ffwd.bench.names import LLAMA_SERVER
from ffwd.bench.servers import ChildServer
from ffwd.bench.workloads import Item
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.request import GenerationRequest
from ffwd.templates import formats

ORIGINS = ("strict", "grammar", "echo", "recall")  # ffwd's per-source injected counts
FLUSH_PROMPT = "0"  # a one-id request between runs: the next prompt shares no prefix with it
TIMEOUT = httpx.Timeout(900.0, connect=10.0)


@dataclass(slots=True)
class Outcome:
    """What one run produced and cost."""

    content: str
    calls: list[tuple[str, str]]  # (name, arguments as JSON text)
    tokens: int  # output ids, injected ones included, EOS excluded
    seconds: float  # the whole request
    prefill_seconds: float = 0.0  # until decoding started
    first_token_seconds: float = 0.0  # until the first output reached the client
    forward_calls: int | None = None  # prefill included; None where unknown
    injected: int = 0
    verify_accepted: int = 0
    verify_rejected: int = 0
    token_ids: list[int] | None = None  # peers only (ffwd's server reports text)
    origins: dict[str, int] = field(default_factory=dict)  # ffwd: injected ids per source


class System(Protocol):
    name: str

    def begin(self, session: str) -> None:
        """Start `session`: forget what earlier requests left (see the module docstring)."""

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome: ...


def chat_body(
    item: Item, fill: str, grammar: bool = True, recall: bool = True
) -> dict[str, Any]:
    """The greedy chat request `item` stands for (plain decoding, no grammar, for ``off``)."""
    choice = item.tool_choice
    if fill == "off" and choice not in (None, "auto", "none"):
        choice = "auto"  # the same prompt; see the module docstring
    settings: dict[str, Any] = {"fill": fill, "grammar": grammar and fill != "off"}
    if not recall:
        settings["recall"] = False
    return {
        "model": "default", "messages": item.messages, "max_tokens": item.max_tokens,
        "temperature": 0.0, "ffwd": settings,
        **({"tools": item.tools, "tool_choice": choice,
            "parallel_tool_calls": not item.single_call} if item.tools else {}),
    }


def chat_request(item: Item, fill: str, grammar: bool = True) -> GenerationRequest:
    """`chat_body` as the server validates and translates it (the bench renders prompts
    with it)."""
    return parse_chat(chat_body(item, fill, grammar))


def parse_output(format_name: str, tools: Sequence[dict[str, Any]], text: str) -> Outcome:
    """Content and calls of `text` as the service's parser reads them (timings left 0)."""
    parser = formats.get_format(format_name).new_parser(tools)
    deltas = [*parser.feed(text), *parser.finish()]
    content = "".join(d.text for d in deltas if isinstance(d, formats.ContentDelta))
    return Outcome(content, [(c.name, c.arguments) for c in parser.calls], 0, 0.0)


def sse(
    client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream, until ``[DONE]`` or its end."""
    with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.read().decode()[:500]}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                return
            yield json.loads(data)


# --- ffwd ------------------------------------------------------------------------


class FfwdHTTP:
    """Streamed chat requests to an ``ffwd serve`` process, with fill mode `fill`
    (`recall` off: no copies from earlier requests' outputs)."""

    def __init__(
        self, url: str, fill: str, name: str, grammar: bool = True, recall: bool = True
    ) -> None:
        self.url, self.fill, self.name = url, fill, name
        self.grammar, self.recall = grammar, recall
        self.client = httpx.Client(timeout=TIMEOUT)
        self.begin("")

    def begin(self, session: str) -> None:
        # The server keeps earlier outputs per API key (recall's tenant); with no keys
        # configured any key is accepted, so one per system and session keeps the
        # systems' outputs and the repeats apart.
        self.headers = {"Authorization": f"Bearer ffwd-bench/{self.name}/{session}"}

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        # The live cache would give the next request its prefix for free: replace it.
        self.client.post(self.url + "/v1/completions",
                         json={"prompt": FLUSH_PROMPT, "max_tokens": 1}).raise_for_status()
        body = {**chat_body(item, self.fill, self.grammar, self.recall), "stream": True,
                "stream_options": {"include_usage": True}}
        content: list[str] = []
        calls: dict[int, list[str]] = {}
        first: float | None = None
        final: dict[str, Any] = {}
        t0 = time.perf_counter()
        url = self.url + "/v1/chat/completions"
        for chunk in sse(self.client, url, body, self.headers):
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("tool_calls"):
                    first = first or time.perf_counter()
                content.append(delta.get("content") or "")
                for tc in delta.get("tool_calls") or []:
                    call = calls.setdefault(tc["index"], ["", ""])
                    call[0] += tc.get("function", {}).get("name") or ""
                    call[1] += tc.get("function", {}).get("arguments") or ""
            if chunk.get("usage"):
                final = chunk
        seconds = time.perf_counter() - t0
        info, stats = final["ffwd"], final["ffwd"]["stats"]
        decode = info["seconds"] - info["prefill_seconds"]
        return Outcome(
            "".join(content), [(n, a) for _, (n, a) in sorted(calls.items())],
            final["usage"]["completion_tokens"], seconds, seconds - decode,
            (first or time.perf_counter()) - t0, info["forward_calls"], stats["injected"],
            stats["verify_accepted"], stats["verify_rejected"],
            origins={k: stats[k] for k in ORIGINS if stats.get(k)},
        )


# --- peers: shared output handling -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decoder:
    """Turns a peer's raw ids into an `Outcome` the way the service would."""

    tokenizer: Any
    format_name: str
    eos_ids: frozenset[int]

    def text(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def has_call(self, item: Item, ids: Sequence[int]) -> bool:
        return bool(parse_output(self.format_name, item.tools, self.text(ids)).calls)

    def finish(
        self, item: Item, ids: Sequence[int], seconds: float, prefill: float, calls: int | None
    ) -> Outcome:
        """Cut at EOS and, for single-call items, right after the call completes."""
        out = list(ids)
        for i, tok in enumerate(out):
            if tok in self.eos_ids:
                out = out[:i]
                break
        if item.single_call:
            # A multi-id step can run past the end of the call; the user gets the call.
            end = next((n for n in range(1, len(out) + 1) if self.has_call(item, out[:n])), None)
            out = out[:end] if end else out
        parsed = parse_output(self.format_name, item.tools, self.text(out))
        return replace(parsed, tokens=len(out), seconds=seconds, prefill_seconds=prefill,
                       first_token_seconds=prefill, forward_calls=calls, token_ids=out)


class LlamaServerHTTP:
    """llama.cpp's server: ``/completion`` with ffwd's prompt ids, greedy, streamed;
    with `spec`, one of its draft-free speculation modes (``ngram-mod``, ...).

    `start` starts the server process (again on each `begin` where the mode keeps
    state across requests); `close` stops it.
    """

    def __init__(
        self, start: Callable[[], ChildServer], decoder: Decoder, spec: str | None = None
    ) -> None:
        self.start, self.decoder, self.spec = start, decoder, spec
        self.name = f"{LLAMA_SERVER}:{spec}" if spec else LLAMA_SERVER
        self.client = httpx.Client(timeout=TIMEOUT)
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
                "stream": True, "return_tokens": True, "cache_prompt": False}
        out: list[int] = []
        first: float | None = None
        timings: dict[str, Any] = {}
        stopped_early = False
        t0 = time.perf_counter()
        for chunk in sse(self.client, self.url + "/completion", body):
            if chunk.get("tokens"):
                first = first or time.perf_counter()
                out += chunk["tokens"]
            timings = chunk.get("timings") or timings
            if item.single_call and self.decoder.has_call(item, out):
                stopped_early = not chunk.get("stop")
                break
        seconds = time.perf_counter() - t0
        if stopped_early:
            # The server may still be generating for the closed stream: wait it out
            # (one slot, so a one-id request returns only once it is free).
            self.client.post(self.url + "/completion",
                             json={"prompt": prompt_ids[:1], "n_predict": 1, "cache_prompt": False})
        o = self.decoder.finish(item, out, seconds, (first or t0) - t0, None)
        return with_drafts(o, timings)


def with_drafts(o: Outcome, timings: dict[str, Any]) -> Outcome:
    """`o` with llama-server's draft counts (``timings.draft_n``: ids drafted,
    ``draft_n_accepted``: kept) as injected and verified ids; absent (no speculation, or
    a stream closed before its last event): unchanged."""
    drafted, kept = timings.get("draft_n"), timings.get("draft_n_accepted")
    if not isinstance(drafted, int) or not isinstance(kept, int):
        return o
    return replace(o, injected=kept, verify_accepted=kept, verify_rejected=drafted - kept)


def parses(outcome: Outcome, item: Item) -> bool:
    """A tool item's output holds at least one call, each of a listed function with JSON args."""
    names = {t["function"]["name"] for t in item.tools}
    if not outcome.calls:
        return False
    for name, arguments in outcome.calls:
        try:
            ok = name in names and isinstance(json.loads(arguments), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            return False
    return True
