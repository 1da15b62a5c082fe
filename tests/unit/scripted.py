"""Events a scripted service emits, as the engine's text layer would send them, and
what such a service declares besides its script (for the HTTP-layer tests, which run
no model: the engine's loop runs each script on a scripted context)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ffwd.engine.core.batch import BatchStats, Forward, Part
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.core.scheduler import Item
from ffwd.engine.events import (
    Alternative,
    FinishReason,
    GenerationResult,
    TokenEvent,
    TokenOrigin,
)
from ffwd.fill import FillStats
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import (
    ContentDelta,
    Delta,
    ReasoningDelta,
    ToolCall,
    ToolCallDelta,
)


def text(piece: str, logprob: float | None = None, top: tuple[Alternative, ...] = (),
         released: str | None = None) -> TokenEvent:
    """One token whose text is `piece`, released as content (with held-back text before
    it, when `released` says so)."""
    out = piece if released is None else released
    deltas = (ContentDelta(out),) if out else ()
    return TokenEvent(0, "sampled", logprob, top, piece, piece.encode(), out, deltas)


def thought(piece: str, logprob: float | None = None) -> TokenEvent:
    """One token whose text is `piece`, released as reasoning."""
    deltas = (ReasoningDelta(piece),) if piece else ()
    return TokenEvent(0, "sampled", logprob, (), piece, piece.encode(), piece, deltas)


def held(piece: str, logprob: float | None = None,
         top: tuple[Alternative, ...] = ()) -> TokenEvent:
    """One token whose text is held back (it rides with a later token's delta)."""
    return TokenEvent(0, "sampled", logprob, top, piece, piece.encode())


def call(index: int, name: str | None = None, arguments: str = "") -> TokenEvent:
    """One token that writes a tool call's fragment (its name on the first)."""
    return TokenEvent(0, "sampled", text=arguments, deltas=(ToolCallDelta(index, name, arguments),))


def result(content: str = "", calls: tuple[ToolCall, ...] = (), finish: FinishReason = "stop",
           prompt: int = 10, completion: int = 2, cached: int = 0, forward_calls: int = 0,
           tail: tuple[Delta, ...] = (), stop_sequence: str | None = None,
           injected: int = 0, reasoning: str = "", reasoning_tokens: int = 0) -> TokenEvent:
    """The last event of a run: what was held back until the end (`tail`), the result
    (its first `injected` ids fast-forwarded from the template; `reasoning` written by
    `reasoning_tokens` of its ids)."""
    origins: list[TokenOrigin] = ["template"] * injected + ["sampled"] * (completion - injected)
    res = GenerationResult(
        text=content, token_ids=[0] * completion, origins=origins,
        finish_reason=finish, stats=FillStats(), forward_calls=forward_calls,
        prompt_tokens=prompt, cached_tokens=cached, seconds=0.0, prefill_seconds=0.0,
        content=content, calls=list(calls), stop_sequence=stop_sequence,
        reasoning=reasoning, reasoning_tokens=reasoning_tokens,
    )
    return TokenEvent.last(res, deltas=tail)


class Here:
    """A channel that delivers on the engine's own thread."""

    def post(self, deliver: Callable[[], None]) -> None:
        deliver()


class Got(list[Item]):
    """What a run delivered; `ended` once its end has come."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = threading.Event()

    def deliver(self, items: list[Item]) -> None:
        self.extend(items)
        if items[-1] is None:
            self.ended.set()


STEP = Forward([0])  # a script's step: one forward of one id (it waits a step)


class ScriptedSequence:
    """A sequence of a scripted context: no cache, its forwards counted."""

    cached_ids: tuple[int, ...] = ()
    trims_freely = True
    prompt_chunk = 64

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.forward_calls = 0
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1


class ScriptedContext:
    """A context of `parallel` scripted sequences whose forwards take `step_s` and give
    rows of zeros; `stats` counts them as a model's would."""

    limit = budget = 64

    def __init__(self, parallel: int = 1, step_s: float = 0.001) -> None:
        self.sequences = [ScriptedSequence(i) for i in range(parallel)]
        self.step_s = step_s
        self.stats = BatchStats()

    def decode(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        time.sleep(self.step_s)
        self.stats.count(len(parts))
        for p in parts:
            self.sequences[p.seq].forward_calls += 1
        return [torch.zeros(len(p.ids) if p.all_rows else 1, 1) for p in parts]

    def set_running(self, seqs: Sequence[int]) -> None:
        pass

    def batch_stats(self) -> BatchStats:
        return self.stats.copy()


class ScriptedModel:
    """What a scripted service declares besides `prepare` and `run` (the rest of
    `ffwd.serve.execute.Service`), for a model that is not there: its `run(prepared,
    cancelled)` yields the events of a run, and `STEP` where it waits for a step."""

    model_id = "tiny"
    parallel = 1
    prompt_cache = PromptCache(0)
    _context: ScriptedContext | None = None

    @property
    def context(self) -> ScriptedContext:
        if self._context is None:
            self._context = ScriptedContext(self.parallel)
        return self._context

    @property
    def resets(self) -> int:
        """Sequences emptied after a failed run."""
        return sum(s.resets for s in self.context.sequences)

    def model_info(self) -> dict[str, Any]:
        return {"context_window": 2048, "tool_format": "hermes", "grammar": False,
                "constrained_tool_calls": False}

    def count_tokens(self, req: GenerationRequest) -> int:
        """One per word of the messages' text, one per tool."""
        return sum(len(str(m.get("content", "")).split()) for m in req.messages) + len(req.tools)

    def prompt(self, prepared: Any) -> list[int]:
        return []

    def steps(self, prepared: Any, seq: Any,
              cancelled: Callable[[], bool]) -> Iterator[TokenEvent | Forward]:
        yield from self.run(prepared, cancelled)

    def run(self, prepared: Any, cancelled: Callable[[], bool]) -> Iterator[TokenEvent | Forward]:
        raise NotImplementedError
