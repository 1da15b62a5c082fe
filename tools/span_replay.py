"""Replay greedy outputs through fill and its span policy, priced by a cost surface.

    python -m tools.span_replay capture OUT.json [--source heldout|bench] [--limit N]
        [--kv-cache f16] [--flash-attn off]
    python -m tools.span_replay replay OUT.json --surface FILE.json [--path NAME] [--spans]
        [--oracle]

Under greedy decoding a verify forward keeps exactly the drafted ids that
match what the model writes next, so once a request's output is known, the
whole fill path (the service's template rows and grammar, echo, recall, the
merge, the span policy and what it learns) can be replayed over it without the
model. `capture` decodes each request once on the model, every copy declined
(so its output is the model's own, one id per forward), and writes the
requests in the order a client sends them: the held-out prompts
(`tools.heldout_prompts`, each sent two or three times) or the bench's echo,
prose, agent and repeat items. `replay` runs them in that order on one
service whose backend (`ReplayBackend`) answers each forward with rows whose
argmax is the recorded output wherever the cache holds it, and prices each
forward on a `CostSurface` at its depth (a surface JSON, or an attention
table such as ``ffwd info`` caches: ``--path`` picks the path, by default the
one it chose). Forwards and spans are exact and time is the surface's quiet
price, so span policies compare without machine noise, as on an exact
attention path: a repeat replays its earlier output id for id.

``--oracle`` sizes every verify span by the recorded output instead of the span
policy: each forward takes exactly the proposed ids the model will keep (up to
`max_append`), so the replay shows the most any span policy could make of the
same sources on that surface, and how far the policy is from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ffwd.engine.backend import CacheBookkeeping, CacheState, check_rewind
from ffwd.engine.cost.surface import CostSurface, Kind, Pricing
from ffwd.engine.llama.attention import AttentionTable

MAX_TOKENS = 400  # the held-out prompts' output budget


class ReplayBackend(CacheBookkeeping):
    """A `Backend` whose model writes `truth` (a prompt and its output): row j of a
    forward puts its argmax on the id after it in `truth` wherever the cache holds
    `truth` up to there (elsewhere on id 0); each forward is logged as (depth, ids,
    kind) for pricing."""

    engine = "replay"
    device = torch.device("cpu")
    attention_table: AttentionTable | None = None
    dtype_name = "replay"
    threads = 1
    context_window = 8192
    can_rewind = True
    can_checkpoint = False
    trims_freely = True
    seq = 0

    def __init__(self, surface: CostSurface, vocab: int, eos: Sequence[int]) -> None:
        self._vocab, self._eos, self._max_append = vocab, frozenset(eos), surface.max_append
        self._ids: list[int] = []
        self._forward_calls = 0
        self._last: torch.Tensor | None = None
        self.cost: CostSurface | None = surface
        self.truth: list[int] = []
        self._good = 0  # leading cached ids that equal `truth`
        self.log: list[tuple[int, int, Kind]] = []

    @property
    def pricing(self) -> Pricing | None:
        return self.cost

    @property
    def rewindable(self) -> int:
        return len(self._ids)

    @property
    def context(self) -> Any:
        return self

    def load(self, truth: Sequence[int]) -> None:
        """A new request: `truth` is its prompt and output; the cache starts empty."""
        self.truth, self.log = list(truth), []
        self.reset()

    def reset(self) -> None:
        self._ids, self._last, self._good = [], None, 0

    def rewind(self, n: int) -> None:
        check_rewind(self, n, "replay")
        if n:
            del self._ids[len(self._ids) - n:]
            self._good, self._last = min(self._good, len(self._ids)), None

    def keep_prefix(self, ids: list[int]) -> int:
        self.reset()
        return 0

    def save_state(self) -> CacheState:
        raise NotImplementedError("the replay keeps no prompt cache")

    def load_state(self, state: CacheState) -> None:
        raise NotImplementedError("the replay keeps no prompt cache")

    def prefill(self, ids: list[int]) -> int:
        self.reset()
        for start in range(0, len(ids), self._max_append):
            self.append(ids[start : start + self._max_append])
        return 0

    def forward(self, ids: list[int]) -> torch.Tensor:
        return self._run(ids, "rows")

    def append(self, ids: list[int]) -> torch.Tensor:
        return self._run(ids, "last")[-1]

    def _run(self, ids: list[int], kind: Kind) -> torch.Tensor:
        if not 0 < len(ids) <= self._max_append:
            raise ValueError(f"a forward of {len(ids)} ids")
        self.log.append((len(self._ids), len(ids), kind))
        self._forward_calls += 1
        rows = torch.zeros(len(ids), self._vocab)
        for j, tok in enumerate(ids):
            p = len(self._ids)
            self._ids.append(tok)
            if self._good == p and p < len(self.truth) and self.truth[p] == tok:
                self._good = p + 1
            on = self._good == p + 1 and p + 1 < len(self.truth)
            rows[j, self.truth[p + 1] if on else 0] = 1.0
        self._last = rows[-1]
        return rows


@dataclass
class Replayed:
    """One request replayed: output ids, decode forwards, their priced ms, a plain
    decode's (one id per forward), injected ids by source, and its verify spans as
    (origin, run, proposed, forwarded, kept)."""

    name: str
    tokens: int
    forwards: int
    ms: float
    plain_ms: float
    injected: dict[str, int]
    spans: list[tuple[str, int, int, int, int]] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.plain_ms / self.ms if self.ms else 0.0


def plain_ms(surface: CostSurface, prompt: int, tokens: int) -> float:
    """Quiet ms of a plain decode of `tokens` ids after `prompt` ids: one one-id forward
    per id but the first (the prefill's last row gives it)."""
    return sum(surface.quiet(1, "last", prompt + i) for i in range(max(0, tokens - 1)))


def _service(backend: Any, tokenizer: Any, name: str) -> Any:
    from ffwd.config import FillConfig
    from ffwd.serve.service import ModelService

    return ModelService(backend, tokenizer, name, FillConfig(mode="echo"), prompt_cache_bytes=0)


def _ready(service: Any, req: dict[str, Any]) -> Any:
    from dataclasses import replace

    from ffwd.serve.dialects.chat import parse_chat
    from ffwd.serve.request import Context

    request = parse_chat(req["body"])
    return service.prepare(replace(request, context=Context(tenant=str(req.get("tenant", "")))))


def oracle_policy(backend: ReplayBackend) -> Any:
    """A span policy that knows the recorded output: it forwards the proposed ids that
    agree with it, as many as one forward takes (the sampled id comes first)."""
    from ffwd.fill.spans import SpanChoice

    def decide(proposal: Any, session: Any) -> SpanChoice:
        truth, at = backend.truth, backend.cache_len + 1  # the sampled id sits at cache_len
        kept = 0
        while (kept < min(len(proposal.ids), backend.max_append - 1) and at + kept < len(truth)
               and truth[at + kept] == proposal.ids[kept]):
            kept += 1
        return SpanChoice(kept, False, kept + 1.0, 1.0, 1.0)

    return decide


def replay(requests: Sequence[dict[str, Any]], surface: CostSurface, tokenizer: Any,
           name: str = "replay", oracle: bool = False) -> list[Replayed]:
    """Replay `requests` in order on one service (module docstring); with `oracle`, the
    spans are sized by the recorded output (`oracle_policy`)."""
    from ffwd.engine.core.generate import drive

    backend = ReplayBackend(surface, len(tokenizer), [tokenizer.eos_token_id])
    service = _service(backend, tokenizer, name)
    policy = oracle_policy(backend) if oracle else None
    out = []
    for req in requests:
        ready = _ready(service, req)
        prompt, output = ready.prompt_ids, list(req["output"])
        backend.load(prompt + output)
        result = None
        for event in drive(backend, service.steps(ready, backend, lambda: False, policy)):
            result = event.result or result
        assert result is not None
        got = result.token_ids + [i for i in output[len(result.token_ids):][:1]
                                  if i in backend.eos_ids]
        if got != output:
            raise AssertionError(f"{req['name']}: the replay wrote another output")
        decode = [(d, m, k) for d, m, k in backend.log if d >= len(prompt)]
        st = result.stats
        out.append(Replayed(
            req["name"], len(output), len(decode),
            sum(surface.quiet(m, k, d) for d, m, k in decode),
            plain_ms(surface, len(prompt), len(output)),
            {k: getattr(st, k) for k in ("strict", "grammar", "echo", "recall") if getattr(st, k)},
            [tuple(s) for s in getattr(st, "verify_spans", [])]))
    return out


def heldout_requests() -> list[dict[str, Any]]:
    """The held-out prompts as a client sends them: each copy prompt twice, each repeat
    three times, one tenant per prompt."""
    from tools.heldout_prompts import COPY, REPEAT

    out = []
    for cases, sends in ((COPY, 2), (REPEAT, 3)):
        for name, text in cases:
            body = {"model": "default", "messages": [{"role": "user", "content": text}],
                    "max_tokens": MAX_TOKENS, "temperature": 0.0, "ffwd": {"fill": "echo"}}
            out += [{"name": f"{name}.{n}", "tenant": name, "body": body}
                    for n in range(1, sends + 1)]
    return out


def bench_requests(limit: int, seed: int) -> list[dict[str, Any]]:
    """The bench's decode items (tools, echo, prose, agent, repeat) in its order, as
    ``ffwd-echo`` sends them within one repeat (a tenant per workload, as the bench's
    sessions)."""
    from ffwd.bench.systems.ffwd_http import chat_body
    from ffwd.bench.workloads import select

    items = select(("tools", "echo", "prose", "agent", "repeat"), limit, seed)
    return [{"name": it.key, "tenant": it.workload, "body": chat_body(it, "echo")}
            for it in items]


def capture(requests: list[dict[str, Any]], *, kv_cache: str, flash_attn: str,
            threads: int) -> list[dict[str, Any]]:
    """Each request's output on the model, every copy declined (module docstring); the
    same body's output is decoded once."""
    from ffwd.engine.core.generate import drive, stream_steps
    from ffwd.engine.llama.context import open_llama
    from ffwd.fill.spans import SpanChoice
    from ffwd.models import load_tokenizer, resolve_model

    ref = resolve_model("default")
    tokenizer = load_tokenizer(ref)
    backend = open_llama(ref.path, threads=threads, kv_cache=kv_cache, flash_attn=flash_attn)
    service = _service(backend, tokenizer, ref.name)
    done: dict[str, list[int]] = {}
    for req in requests:
        key = json.dumps(req["body"], sort_keys=True)
        if key not in done:
            prep = _ready(service, req).prepared
            backend.reset()
            result = None
            steps = stream_steps(backend, tokenizer, prep,
                                 policy=lambda p, s: SpanChoice(0, False, 1.0, 1.0, 1.0))
            for event in drive(backend, steps):
                result = event.result or result
            assert result is not None
            ended = result.finish_reason == "stop" and result.stop_sequence is None
            done[key] = result.token_ids + ([tokenizer.eos_token_id] if ended else [])
            print(f"{req['name']}: {len(done[key])} ids", file=sys.stderr)
        req["output"] = done[key]
    return requests


def load_surface(path: str, attention: str | None = None) -> CostSurface:
    """A `CostSurface` JSON, or an attention table's path `attention` (default: its
    chosen one)."""
    data = json.loads(Path(path).read_text())
    if "chosen" not in data:
        return CostSurface.from_dict(data)
    return CostSurface.from_dict(data["paths"][attention or data["chosen"]]["surface"])


def main(argv: Sequence[str] | None = None) -> int:
    from ffwd.models import load_tokenizer, resolve_model

    p = argparse.ArgumentParser(prog="python -m tools.span_replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("capture", "replay"))
    p.add_argument("file", help="the captured requests (JSON)")
    p.add_argument("--source", choices=("heldout", "bench"), default="heldout")
    p.add_argument("--limit", type=int, default=1, help="bench items per workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-cache", default="f16")
    p.add_argument("--flash-attn", default="off")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--surface", help="replay: a cost surface or attention table JSON")
    p.add_argument("--path", default=None, help="replay: the attention table's path")
    p.add_argument("--spans", action="store_true", help="replay: print every verify span")
    p.add_argument("--oracle", action="store_true",
                   help="replay: size each span by the recorded output (the policy's bound)")
    args = p.parse_args(argv)
    if args.command == "capture":
        reqs = heldout_requests() if args.source == "heldout" else \
            bench_requests(args.limit, args.seed)
        reqs = capture(reqs, kv_cache=args.kv_cache, flash_attn=args.flash_attn,
                       threads=args.threads)
        Path(args.file).write_text(json.dumps(reqs))
        return 0
    if not args.surface:
        p.error("replay needs --surface")
    tokenizer = load_tokenizer(resolve_model("default"))
    surface = load_surface(args.surface, args.path)
    by_workload: dict[str, list[float]] = {}  # bench items: "workload id"
    for r in replay(json.loads(Path(args.file).read_text()), surface, tokenizer,
                    oracle=args.oracle):
        print(f"{r.name:<34} {r.tokens:>4} ids {r.forwards:>4} fwd {r.ms:>7.0f} ms "
              f"(plain {r.plain_ms:>6.0f}) {r.speedup:5.2f}x {r.injected}")
        if args.spans:
            print("    " + " ".join(f"{o[0]}{run}:{n}/{f}/{k}" for o, run, n, f, k in r.spans))
        for group in {r.name.split(" ")[0] if " " in r.name else "", "all"} - {""}:
            ms_plain = by_workload.setdefault(group, [0.0, 0.0])
            ms_plain[0], ms_plain[1] = ms_plain[0] + r.ms, ms_plain[1] + r.plain_ms
    for group, (ms, plain) in sorted(by_workload.items(), key=lambda g: g[0] == "all"):
        print(f"{group:<34} {plain / ms if ms else 0:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
