"""The systems `ffwd bench` compares, each behind ``run(item, prompt_ids) -> Outcome``.

* ``ffwd-off``, ``ffwd-strict``, ``ffwd-echo``: streamed chat requests to an
  ``ffwd serve`` process (`ffwd.bench.servers`), timed by the client, so the
  serving path (HTTP, template, tool rows, parsing) is in every figure. A
  bare name runs on the bench's ``--backend``; ``ffwd-off:transformers`` (or
  ``:llamacpp``) names the engine. ``ffwd-off`` sends a forced call
  (``tool_choice=required``) as ``auto``: the same prompt, decoded plainly,
  where the server would otherwise force the call through the strict tier,
  and without the grammar. ``ffwd-strict-nogrammar`` (not run by default)
  is ``ffwd-strict`` with ``"ffwd": {"grammar": false}``: what the grammar
  adds to the strict tier.
* ``llama-server``: llama.cpp's own server on the same GGUF, sent the very
  prompt ids ffwd renders (``/completion`` takes ids), greedy, the same
  ``max_tokens``, stopping at its end-of-generation ids.
* ``hf-generate``, ``hf-prompt-lookup``: transformers' ``model.generate``
  in this process (greedy; the second with ``prompt_lookup_num_tokens=10``).

Every system starts from an empty cache and stops at an end id, at the item's
``max_tokens``, or (``item.single_call``) once its output holds a complete
call; the client parses each output the way the service does. Timings:
``seconds`` is the whole request; ``first_token_seconds`` until the first
output reached the client; ``prefill_seconds`` until the server started
decoding (ffwd: the request minus its reported decode time; the others: the
first output).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx

from ffwd.bench.workloads import Item
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.request import GenerationRequest
from ffwd.templates import formats

FFWD_FILLS = ("off", "strict", "echo")
FFWD_SYSTEMS = tuple(f"ffwd-{f}" for f in FFWD_FILLS)
ENGINES = ("llamacpp", "transformers")
LLAMA_SERVER = "llama-server"
HF_SYSTEMS = ("hf-generate", "hf-prompt-lookup")
ALL_SYSTEMS = (*FFWD_SYSTEMS, LLAMA_SERVER, *HF_SYSTEMS)
NO_GRAMMAR = "-nogrammar"
EXTRA_SYSTEMS = ("ffwd-strict" + NO_GRAMMAR,)  # accepted by --systems, not run by default
LOOKUP_TOKENS = 10
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


class System(Protocol):
    name: str

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome: ...


def split_name(name: str) -> tuple[str, str | None]:
    """``"ffwd-off:transformers"`` -> ``("ffwd-off", "transformers")``; no engine: None."""
    base, _, engine = name.partition(":")
    return base, engine or None


def chat_body(item: Item, fill: str, grammar: bool = True) -> dict[str, Any]:
    """The greedy chat request `item` stands for (plain decoding, no grammar, for ``off``)."""
    choice = item.tool_choice
    if fill == "off" and choice not in (None, "auto", "none"):
        choice = "auto"  # the same prompt; see the module docstring
    return {
        "model": "default", "messages": item.messages, "max_tokens": item.max_tokens,
        "temperature": 0.0, "ffwd": {"fill": fill, "grammar": grammar and fill != "off"},
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


def sse(client: httpx.Client, url: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream, until ``[DONE]`` or its end."""
    with client.stream("POST", url, json=body) as r:
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
    """Streamed chat requests to an ``ffwd serve`` process, with fill mode `fill`."""

    def __init__(self, url: str, fill: str, name: str, grammar: bool = True) -> None:
        self.url, self.fill, self.name, self.grammar = url, fill, name, grammar
        self.client = httpx.Client(timeout=TIMEOUT)

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        # The live cache would give the next request its prefix for free: replace it.
        self.client.post(self.url + "/v1/completions",
                         json={"prompt": FLUSH_PROMPT, "max_tokens": 1}).raise_for_status()
        body = {**chat_body(item, self.fill, self.grammar), "stream": True,
                "stream_options": {"include_usage": True}}
        content: list[str] = []
        calls: dict[int, list[str]] = {}
        first: float | None = None
        final: dict[str, Any] = {}
        t0 = time.perf_counter()
        for chunk in sse(self.client, self.url + "/v1/chat/completions", body):
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
    """llama.cpp's server: ``/completion`` with ffwd's prompt ids, greedy, streamed."""

    name = LLAMA_SERVER

    def __init__(self, url: str, decoder: Decoder) -> None:
        self.url, self.decoder = url, decoder
        self.client = httpx.Client(timeout=TIMEOUT)

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        body = {"prompt": prompt_ids, "n_predict": item.max_tokens, "temperature": 0.0,
                "stream": True, "return_tokens": True, "cache_prompt": False}
        out: list[int] = []
        first: float | None = None
        stopped_early = False
        t0 = time.perf_counter()
        for chunk in sse(self.client, self.url + "/completion", body):
            if chunk.get("tokens"):
                first = first or time.perf_counter()
                out += chunk["tokens"]
            if item.single_call and self.decoder.has_call(item, out):
                stopped_early = not chunk.get("stop")
                break
        seconds = time.perf_counter() - t0
        if stopped_early:
            # The server may still be generating for the closed stream: wait it out
            # (one slot, so a one-id request returns only once it is free).
            self.client.post(self.url + "/completion",
                             json={"prompt": prompt_ids[:1], "n_predict": 1, "cache_prompt": False})
        return self.decoder.finish(item, out, seconds, (first or t0) - t0, None)


# --- transformers generate --------------------------------------------------------


class HFGenerate:
    """transformers' ``model.generate``, greedy, optionally with prompt lookup."""

    def __init__(self, model: Any, decoder: Decoder, lookup: int = 0) -> None:
        self.model = model
        self.decoder = decoder
        self.lookup = lookup
        self.name = "hf-prompt-lookup" if lookup else "hf-generate"

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        eos = sorted(self.decoder.eos_ids)
        config = GenerationConfig(
            max_new_tokens=item.max_tokens, do_sample=False, eos_token_id=eos,
            pad_token_id=eos[0], prompt_lookup_num_tokens=self.lookup or None,
        )
        x = torch.tensor([prompt_ids], dtype=torch.long, device=self.model.device)
        stop = StoppingCriteriaList([_CallComplete(self.decoder, item, len(prompt_ids))]
                                    if item.single_call else [])
        counter, first = _Counter(), _FirstToken()
        hook = self.model.register_forward_pre_hook(counter)
        try:
            t0 = time.perf_counter()
            with torch.no_grad():
                out = self.model.generate(
                    x, attention_mask=torch.ones_like(x), generation_config=config,
                    stopping_criteria=stop, streamer=first,
                )
            seconds = time.perf_counter() - t0
        finally:
            hook.remove()
        new = out[0, len(prompt_ids) :].tolist()
        return self.decoder.finish(item, new, seconds, (first.at or t0) - t0, counter.n)


class _Counter:
    """A forward pre-hook that counts the model's forward calls."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.n += 1


class _FirstToken:
    """A `generate` streamer that notes when the first new id arrives (prefill done)."""

    def __init__(self) -> None:
        self.puts = 0
        self.at: float | None = None

    def put(self, value: Any) -> None:
        self.puts += 1
        if self.puts == 2:  # the first put is the prompt
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


class _CallComplete:
    """A stopping criterion: `generate` stops once the new ids parse as a complete call."""

    def __init__(self, decoder: Decoder, item: Item, prompt_len: int) -> None:
        self.decoder, self.item, self.prompt_len = decoder, item, prompt_len

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = self.decoder.has_call(self.item, input_ids[0, self.prompt_len :].tolist())
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


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
