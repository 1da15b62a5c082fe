"""The systems `ffwd bench` compares, each behind ``run(item, prompt_ids) -> Outcome``.

* ``ffwd-off``, ``ffwd-strict``, ``ffwd-echo``: a served chat request through
  `ModelService` (prepare: render, tokenize, compile tool rows and the
  grammar; run: engine and tool-call parser), timed from the request to the
  last event. ``ffwd-off`` decodes plainly, without the grammar, even for
  ``tool_choice=required``, where the server itself would force the call.
  ``ffwd-strict-nogrammar`` (not run by default) is ``ffwd-strict`` with
  ``"ffwd": {"grammar": false}``: what the grammar adds to the strict tier.
* ``hf-generate`` and ``hf-prompt-lookup``: transformers' ``model.generate``
  (greedy; the second with ``prompt_lookup_num_tokens=10``) on the same
  loaded model, from the same prompt ids.
* ``llamacpp`` and ``llamacpp-lookup``: llama-cpp-python on the same GGUF
  file (its own quantized weights), greedy, the second with its prompt-lookup
  draft; built only when ``llama_cpp`` imports.

Every system starts from an empty cache, stops at an EOS id, at the item's
``max_tokens``, or (``item.single_call``) once its output parses as a
complete tool call, and returns the parsed content and calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ffwd.bench.workloads import Item
from ffwd.serve.events import Event, Finished
from ffwd.serve.protocol import ChatCompletionRequest
from ffwd.serve.service import ModelService
from ffwd.templates import formats

FFWD_SYSTEMS = ("ffwd-off", "ffwd-strict", "ffwd-echo")
NO_GRAMMAR = "-nogrammar"
HF_SYSTEMS = ("hf-generate", "hf-prompt-lookup")
LLAMA_SYSTEMS = ("llamacpp", "llamacpp-lookup")
ALL_SYSTEMS = (*FFWD_SYSTEMS, *HF_SYSTEMS, *LLAMA_SYSTEMS)
EXTRA_SYSTEMS = ("ffwd-strict" + NO_GRAMMAR,)  # accepted by --systems, not run by default
LOOKUP_TOKENS = 10


@dataclass(slots=True)
class Outcome:
    """What one run produced and cost."""

    content: str
    calls: list[tuple[str, str]]  # (name, arguments as JSON text)
    tokens: int  # output ids, injected ones included, EOS excluded
    seconds: float  # the whole request
    prefill_seconds: float = 0.0  # until decoding starts (ffwd: prepare + prompt forward)
    forward_calls: int | None = None  # prefill included; None where unknown
    injected: int = 0
    verify_accepted: int = 0
    verify_rejected: int = 0
    token_ids: list[int] | None = None  # peers only (ffwd's service reports text)


class System(Protocol):
    name: str

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome: ...


def chat_request(item: Item, fill: str, grammar: bool = True) -> ChatCompletionRequest:
    """The greedy chat request that `item` stands for, with fill mode `fill`."""
    return ChatCompletionRequest.model_validate({
        "messages": item.messages,
        "tools": item.tools or None,
        "tool_choice": item.tool_choice,
        "max_tokens": item.max_tokens,
        "temperature": 0.0,
        "parallel_tool_calls": not item.single_call,
        "ffwd": {"fill": fill, "grammar": grammar},
    })


def parse_output(format_name: str, tools: Sequence[dict[str, Any]], text: str) -> Outcome:
    """Content and calls of `text` as the service's parser reads them (timings left 0)."""
    parser = formats.get_format(format_name).new_parser(tools)
    deltas = [*parser.feed(text), *parser.finish()]
    content = "".join(d.text for d in deltas if isinstance(d, formats.ContentDelta))
    return Outcome(content, [(c.name, c.arguments) for c in parser.calls], 0, 0.0)


# --- ffwd ------------------------------------------------------------------------


class FfwdSystem:
    """A chat request through `ModelService`, as the server runs it."""

    def __init__(self, service: ModelService, fill: str, grammar: bool = True) -> None:
        self.service = service
        self.fill = fill
        self.grammar = grammar and fill != "off"
        self.name = f"ffwd-{fill}" + ("" if grammar else NO_GRAMMAR)

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        events: list[Event] = []
        self.service.reset()  # no prompt cache carried over from the previous system
        t0 = time.perf_counter()
        prep = self.service.prepare_chat(chat_request(item, self.fill, self.grammar))
        if self.fill == "off":
            prep = replace(prep, fill=replace(prep.fill, fill="off"))
        self.service.run(prep, events.append, lambda: False)
        seconds = time.perf_counter() - t0
        done = events[-1]
        assert isinstance(done, Finished)
        info = done.ffwd
        decode = info["seconds"] - info["prefill_seconds"]
        return Outcome(
            done.content or "", [(c.name, c.arguments) for c in done.tool_calls],
            done.usage.completion_tokens, seconds, seconds - decode, info["forward_calls"],
            info["stats"]["injected"], info["stats"]["verify_accepted"],
            info["stats"]["verify_rejected"],
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
                       forward_calls=calls, token_ids=out)


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


# --- llama.cpp ----------------------------------------------------------------------


class LlamaCpp:
    """llama-cpp-python on the GGUF file, greedy, optionally with its prompt-lookup draft."""

    def __init__(self, gguf: str, decoder: Decoder, threads: int, lookup: int = 0) -> None:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(num_pred_tokens=lookup) if lookup else None
        # logits_all with the draft: llama-cpp-python 0.3.36 then keeps logits for
        # every position, but sizes that buffer from the argument, so a prompt
        # longer than n_batch overflows it unless the argument says so too.
        self.llm = _counting_llama()(
            model_path=gguf, n_ctx=4096, n_batch=512, n_threads=threads,
            n_threads_batch=threads, draft_model=draft, logits_all=bool(lookup), verbose=False,
        )
        self.decoder = decoder
        self.name = "llamacpp-lookup" if lookup else "llamacpp"

    def run(self, item: Item, prompt_ids: list[int]) -> Outcome:
        out: list[int] = []
        self.llm.reset()  # no prompt cache carried over
        evals = self.llm.evals
        t0 = time.perf_counter()
        first: float | None = None
        for tok in self.llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                     repeat_penalty=1.0, reset=True):
            first = first or time.perf_counter()
            if tok in self.decoder.eos_ids:
                break
            out.append(tok)
            if len(out) >= item.max_tokens or (
                item.single_call and self.decoder.has_call(item, out)
            ):
                break
        seconds = time.perf_counter() - t0
        return self.decoder.finish(item, out, seconds, (first or t0) - t0, self.llm.evals - evals)


def _counting_llama() -> Any:
    """`llama_cpp.Llama` that counts its `eval` calls (one per batch of ids it runs)."""
    from llama_cpp import Llama

    class CountingLlama(Llama):
        evals = 0

        def eval(self, tokens: Sequence[int]) -> None:
            self.evals += 1
            super().eval(tokens)

    return CountingLlama


# --- building ------------------------------------------------------------------------


def llama_unavailable(gguf: str | None) -> str | None:
    """Why the llama.cpp systems cannot run here, or None when they can."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'ffwd[llamacpp]')"
    if gguf is None:
        return "the model is not a GGUF file"
    return None


def build_systems(
    names: Sequence[str], service: ModelService, gguf: str | None, threads: int
) -> tuple[list[System], dict[str, str]]:
    """The systems named (in that order) and, for those that cannot run, why."""
    decoder = Decoder(service.tokenizer, service.format_name, service.backend.eos_ids)
    model = service.backend.model
    built: list[System] = []
    skipped: dict[str, str] = {}
    llama_reason = llama_unavailable(gguf) if set(names) & set(LLAMA_SYSTEMS) else None
    for name in names:
        if name in FFWD_SYSTEMS or name in EXTRA_SYSTEMS:
            fill = name.removeprefix("ffwd-").removesuffix(NO_GRAMMAR)
            built.append(FfwdSystem(service, fill, not name.endswith(NO_GRAMMAR)))
        elif name in HF_SYSTEMS:
            built.append(HFGenerate(model, decoder, LOOKUP_TOKENS if "lookup" in name else 0))
        elif name in LLAMA_SYSTEMS:
            if llama_reason is not None:
                skipped[name] = llama_reason
                continue
            assert gguf is not None
            lookup = LOOKUP_TOKENS if "lookup" in name else 0
            built.append(LlamaCpp(gguf, decoder, threads, lookup))
        else:
            known = ", ".join((*ALL_SYSTEMS, *EXTRA_SYSTEMS))
            raise ValueError(f"unknown system {name!r}: expected some of {known}")
    return built, skipped


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
