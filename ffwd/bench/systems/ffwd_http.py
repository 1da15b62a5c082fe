"""The ``ffwd-*`` systems: streamed chat requests to an ``ffwd serve`` process."""

from __future__ import annotations

import time
from typing import Any

from ffwd.bench.systems import FLUSH_PROMPT, Outcome, http_client, sse
from ffwd.bench.workloads import Item
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.request import GenerationRequest

ORIGINS = ("strict", "grammar", "echo", "recall")  # ffwd's per-source injected counts


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


class FfwdHTTP:
    """Streamed chat requests to an ``ffwd serve`` process, with fill mode `fill`
    (`recall` off: no copies from earlier requests' outputs)."""

    def __init__(
        self, url: str, fill: str, name: str, grammar: bool = True, recall: bool = True
    ) -> None:
        self.url, self.fill, self.name = url, fill, name
        self.grammar, self.recall = grammar, recall
        self.client = http_client()
        self.begin("")

    def begin(self, session: str) -> None:
        # The server keeps earlier outputs per API key (recall's tenant); with no keys
        # configured any key is accepted, so one per system and session keeps the
        # systems' outputs and the repeats apart.
        self.headers = {"Authorization": f"Bearer ffwd-bench/{self.name}/{session}"}

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        if not item.warm:
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
            cached=(final["usage"].get("prompt_tokens_details") or {}).get("cached_tokens"),
            first_span=(stats.get("span_lens") or [None])[0],
            spans=[(o, p, f, k) for o, _run, p, f, k in stats.get("verify_spans") or ()],
        )
