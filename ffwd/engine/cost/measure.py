"""Measure a backend's `CostSurface`: timed forwards of each span length, at a few depths.

`measure(backend)` runs in two phases:

1. **Shallow.** After a short synthetic prompt (`context` ids), every length in
   `ffwd.fill.spans.POINTS` of both kinds (every row, last row only), each
   undone (`Backend.mark`/`undo`), and the checkpoint and restore of a cache
   that cannot rewind.
2. **Deep.** The cache grows by prefill chunks (`max_append` ids, each timed:
   a chunk's cost at the depth it started from) to each of `depths` in turn,
   and the `widths` (last row only) are timed there. The head's share of a
   forward (every row against the last) does not depend on depth, so the rows
   at depth are the shallow rows' excess over the last row added to the last
   row measured there. Growth stops at the first depth that the time already
   spent plus the projected growth would take past `budget_s`: deeper costs are
   then extrapolated (`CostSurface`).

One untimed round first (a shape's first call may compile kernels), then
`repeats` rounds, keeping each point's median: rounds rather than one point at
a time, so a machine whose speed drifts skews every point alike (the running
level corrects the scale later). Leaves the backend's cache empty.

`measure_paths` does this on each attention path a llama.cpp backend can
reopen on, and chooses one (`ffwd.engine.llama.attention`), and measures each
path's rounding (`measure_margin`): how far the gap between the two best logits
moves when the same ids are forwarded one at a time or together, the tie
margin fill may keep a draft within (``--tie-margin auto``). `ffwd.models`
caches the result per model and configuration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ffwd.engine.backend import Backend, Mark
from ffwd.engine.cost.surface import KINDS, CostSurface, Kind, monotone
from ffwd.engine.llama.attention import AttentionPath, AttentionTable, Measured, Mix, choose
from ffwd.fill.spans import POINTS, Undo

DEPTHS = (1024, 2048, 4096)  # besides half the context window
# Span lengths timed at depth: a plain step, short and long spans (32 lies between 16 and 64,
# timed both: on a CPU a forward's cost is close to linear in its ids past a few).
WIDTHS = (1, 4, 16, 64)
BUDGET_S = 10.0  # seconds the deep phase may take (growing the cache dominates)
Progress = Callable[[str], None]


def measure(
    backend: Backend, *, context: int = 96, repeats: int = 3, points: Sequence[int] = POINTS,
    depths: Sequence[int] | None = None, widths: Sequence[int] = WIDTHS,
    budget_s: float | None = None, progress: Progress | None = None,
) -> CostSurface:
    """The backend's `CostSurface` (see the module docstring). `depths` defaults to
    `DEPTHS` and half the context window; ``()`` measures the shallow phase only."""
    vocab, chunk = backend.vocab_size, backend.max_append
    window = backend.context_window
    if depths is None:
        depths = sorted({*DEPTHS, window // 2})
    prompt = [(7 * i + 3) % vocab for i in range(context)]
    backend.reset()
    backend.prefill(prompt)
    shallow = [(m, kind) for m in points if m <= chunk for kind in KINDS]
    times, undo = _time_shapes(backend, shallow, repeats)
    rows = {m: ms for (m, kind), ms in times.items() if kind == "rows"}
    last = {m: ms for (m, kind), ms in times.items() if kind == "last"}
    surface = CostSurface({context: rows}, {context: last}, chunk, undo)
    if backend.can_rewind and chunk >= max(points):
        _deep(backend, surface, [d for d in depths if context < d <= window - chunk],
              [w for w in widths if w <= chunk], repeats,
              BUDGET_S if budget_s is None else budget_s, progress)
    backend.reset()
    return surface


def _deep(backend: Backend, surface: CostSurface, depths: Sequence[int],
          widths: Sequence[int], repeats: int, budget_s: float,
          progress: Progress | None) -> None:
    """Phase 2: grow the cache to each depth, timing its chunks, and time `widths` there."""
    chunk, vocab, window = backend.max_append, backend.vocab_size, backend.context_window
    base = min(surface.rows)
    filler = [(13 * i + 1) % vocab for i in range(chunk)]
    started: dict[int, float] = {}  # a full chunk's ms by the depth it started from
    t_start = time.perf_counter()
    measured = [base]
    for depth in [*sorted(depths), None]:
        # 1. a chunk from the depth just measured, then on to the next depth (if any),
        #    unless the growth already spent and the projected rest overrun the budget.
        here = backend.cache_len
        if here + chunk <= window:
            t0 = time.perf_counter()
            backend.append(filler)
            started[here] = (time.perf_counter() - t0) * 1000
        if depth is None or depth + max(widths) > window:
            break
        need = -(-(depth - backend.cache_len) // chunk)
        spent = time.perf_counter() - t_start
        if spent + 1.5 * need * started.get(here, 0.0) / 1000 > budget_s:
            break
        if progress is not None:
            progress(f"depth {depth}")
        while backend.cache_len < depth:
            backend.append(filler[: min(chunk, depth - backend.cache_len)])
        # 2. the widths at this depth (last row only).
        times, _ = _time_shapes(backend, [(w, "last") for w in widths], repeats)
        surface.last[depth] = monotone({m: ms for (m, _kind), ms in times.items()})
        measured.append(depth)
    for d in measured:  # each depth's prefill chunk
        if d in started:
            surface.last[d] = monotone({**surface.last[d], chunk: started[d]})
    for d in measured[1:]:  # rows at depth = last (with its chunk) + the head's excess
        surface.rows[d] = monotone({
            w: surface.last[d][w]
            + max(0.0, surface.quiet(w, "rows", base) - surface.quiet(w, "last", base))
            for w in widths})


def _time_shapes(
    backend: Backend, shapes: Sequence[tuple[int, Kind]], repeats: int
) -> tuple[dict[tuple[int, Kind], float], Undo]:
    """Median ms of each (m, kind) forward, each undone; and what undoing costs."""
    vocab = backend.vocab_size
    span = [(11 * i + 5) % vocab for i in range(max(m for m, _ in shapes))]
    # Without rewind or checkpoint there is nothing to undo with: the context
    # grows by m each time, which a short measurement can afford.
    undoable = backend.can_rewind or backend.can_checkpoint
    times: dict[tuple[int, Kind], list[float]] = {shape: [] for shape in shapes}
    befores: list[float] = []
    afters: list[float] = []
    for rnd in range(repeats + 1):
        for m, kind in shapes:
            if backend.cache_len + m > backend.context_window:
                continue
            mark, ms_before = _timed_mark(backend) if undoable else (None, 0.0)
            t0 = time.perf_counter()
            if kind == "rows":
                backend.forward(span[:m])
            else:
                backend.append(span[:m])
            ms = (time.perf_counter() - t0) * 1000
            if mark is not None:
                t0 = time.perf_counter()
                backend.undo(mark)
                if rnd and mark.snapshot is not None:
                    befores.append(ms_before)
                    afters.append((time.perf_counter() - t0) * 1000)
            if rnd:
                times[(m, kind)].append(ms)
    undo = Undo(_median(befores), _median(afters), replay=True) if befores else Undo()
    return {shape: _median(ts) for shape, ts in times.items() if ts}, undo


def _timed_mark(backend: Backend) -> tuple[Mark, float]:
    t0 = time.perf_counter()
    mark = backend.mark()
    return mark, (time.perf_counter() - t0) * 1000


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else 0.0


MARGIN_DEPTHS = (96, 640)  # a short cache, and one past where kernels change (512 cells)
MARGIN_TOKENS = 48  # greedy ids decoded one at a time at each depth
MARGIN_SPANS = (16, 64)  # then forwarded together in these widths


def gap_moves(single: torch.Tensor, batched: torch.Tensor) -> float:
    """How far the gap between each row's two best logits (by `single`) moved in `batched`,
    the most over the rows: what a verify forward's rounding can do to a near-tie.

    >>> single = torch.tensor([[1.0, 3.0, 2.9], [0.0, 5.0, 1.0]])
    >>> round(gap_moves(single, torch.tensor([[1.0, 2.95, 3.0], [0.1, 5.0, 1.0]])), 3)
    0.15
    >>> gap_moves(single, single)
    0.0
    """
    top = single.topk(2, dim=-1).indices
    rows = torch.arange(single.shape[0])
    first, second = top[:, 0], top[:, 1]
    moved = (single[rows, first] - single[rows, second]) - \
        (batched[rows, first] - batched[rows, second])
    return float(moved.abs().max()) if len(moved) else 0.0


def measure_margin(backend: Backend, depths: Sequence[int] = MARGIN_DEPTHS,
                   tokens: int = MARGIN_TOKENS, spans: Sequence[int] = MARGIN_SPANS) -> float:
    """The most `gap_moves` over `tokens` greedy ids decoded one at a time after each of
    `depths` synthetic ids, then forwarded again in forwards of each of `spans` ids: 0.0
    where every forward rounds alike (an exact path). Leaves the cache empty."""
    vocab, most = backend.vocab_size, 0.0
    for depth in depths:
        if not backend.can_rewind or depth + tokens > backend.context_window:
            continue
        backend.reset()
        backend.prefill([(7 * i + 3) % vocab for i in range(depth)])
        ids, rows, row = [], [], backend.last_logits
        for _ in range(tokens):  # 1. one id at a time, as plain decoding goes
            rows.append(row)
            ids.append(int(row.argmax()))
            row = backend.append(ids[-1:])
        single = torch.stack(rows[1:])  # the rows that predict ids[1:]
        for span in (s for s in spans if s <= backend.max_append):
            # 2. the same ids together, as a verify forward takes them.
            backend.rewind(backend.cache_len - depth)
            got = [backend.forward(ids[i : i + span]) for i in range(0, tokens - 1, span)]
            most = max(most, gap_moves(single, torch.cat(got)))
    backend.reset()
    return most


def measure_paths(backend: Any, paths: Sequence[AttentionPath], mix: Mix,
                  memory_bound_mib: float, progress: Progress | None = None,
                  measure_fn: Callable[..., CostSurface] | None = None,
                  margin_fn: Callable[[Any], float] | None = None) -> AttentionTable:
    """Time each of `paths` on `backend`, a sequence of a llama.cpp context (left on the
    chosen one), and choose (`choose`)."""
    found: dict[str, Measured] = {}
    for path in paths:
        try:
            memory = backend.context.use_attention(path)
        except RuntimeError as exc:  # llama.cpp refused the context (memory, kernels)
            found[path.name] = Measured(None, 0.0, f"unavailable: {exc}")
            continue
        say = None if progress is None else (lambda text, p=path: progress(f"{p.name} {text}"))
        surface = (measure_fn or measure)(backend, progress=say)
        found[path.name] = Measured(surface, memory, margin=(margin_fn or measure_margin)(backend))
    chosen, why = choose(found, mix, backend.context_window, memory_bound_mib)
    if chosen != paths[-1].name:  # measured last, still open
        backend.context.use_attention(AttentionPath.parse(chosen))
    return AttentionTable(found, chosen, why, mix)
