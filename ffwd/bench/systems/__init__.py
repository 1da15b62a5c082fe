"""The systems `ffwd bench` compares, each behind ``run(item, prompt_ids) -> Outcome``.

* ``ffwd-off``, ``ffwd-strict``, ``ffwd-echo``: streamed chat requests to an
  ``ffwd serve`` process (`ffwd_http`, started by `servers`), timed by the client, so the
  serving path (HTTP, template, tool rows, parsing) is in every figure. A
  bare name runs on the bench's ``--backend`` in the server's default mode;
  ``ffwd-off:transformers`` (or ``:llamacpp``) names the engine,
  ``ffwd-off:deterministic`` the exact mode (`names`). ``ffwd-off`` sends a
  forced call (``tool_choice=required``) as ``auto``: the same prompt, decoded
  plainly, where the server would otherwise force the call through the strict
  tier, and without the grammar. ``ffwd-echo-norecall`` is ``ffwd-echo`` with
  ``"ffwd": {"recall": false}``: echo without the index of earlier requests'
  outputs. ``ffwd-strict-nogrammar`` (not run by default) is ``ffwd-strict``
  with ``"ffwd": {"grammar": false}``: what the grammar adds to the strict tier.
* ``llama-server``: llama.cpp's own server on the same GGUF, sent the very
  prompt ids ffwd renders (``/completion`` takes ids), greedy, the same
  ``max_tokens``, stopping at its end-of-generation ids (`llama_http`; the process:
  `llama_server`, the native build of ``make peers``, else the xllamacpp
  fallback, which reports name as such).
  ``llama-server:ngram-mod`` (``:ngram-simple``, ``:ngram-map-k``,
  ``:ngram-cache``; ``:ngram-map-k4v`` not by default) is the same server with
  that draft-free speculation mode on; the ids it drafted and kept (its
  ``timings.draft_n`` and ``draft_n_accepted``) count as verified and accepted.
* ``hf-generate``, ``hf-prompt-lookup``: transformers' ``model.generate``
  in this process (greedy; the second with ``prompt_lookup_num_tokens=10``;
  `hf_generate`).

Every system starts from an empty cache (but for an item marked ``warm``, the
next turn of a conversation, which keeps what the previous turn left) and
stops at an end id, at the item's
``max_tokens``, or (``item.single_call``) once its output holds a complete
call; the client parses each output the way the service does. What outlives
a request is scoped to a session (`System.begin`, one per workload and
repeat): an ffwd system's requests present an API key of their own per
session, so recall copies only from that system's earlier outputs in that
workload and repeat, and a
speculating llama-server restarts (``ngram-mod``'s pool and ``ngram-map-k``'s
map outlive a request). Timings:
``seconds`` is the whole request; ``first_token_seconds`` until the first
output reached the client; ``prefill_seconds`` until the server started
decoding (ffwd: the request minus its reported decode time; the others: the
first output).

This module holds what every system shares: `Outcome`, the `System` protocol,
the `Decoder` that peers returning raw ids go through, and the stream reader.
A new kind of system is a module beside `ffwd_http`, `llama_http` and
`hf_generate`, with its names in `names` and its start in `ffwd.bench.run`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import httpx

from ffwd.bench.workloads import Item
from ffwd.templates import formats

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
    cached: int | None = None  # prompt ids the server took from its cache (None: unknown)
    first_span: int | None = None  # ffwd: the first injected span's ids (None: none, or a peer)
    # ffwd: every verify proposal as (origin, proposed, forwarded, kept) ids; None for a peer
    spans: list[tuple[str, int, int, int]] | None = None


class System(Protocol):
    name: str

    def begin(self, session: str) -> None:
        """Start `session`: forget what earlier requests left (see the module docstring)."""

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome: ...


def http_client() -> httpx.Client:
    """A client that opens a connection per request: the servers close a connection left
    idle for a few seconds (while other systems run), and one reused as it closes fails."""
    return httpx.Client(timeout=TIMEOUT, limits=httpx.Limits(max_keepalive_connections=0))


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
