"""Which attention path llama.cpp runs, chosen by measurement on this machine.

ggml attends in one of two ways: flash attention (one fused kernel, the only
one that reads a quantized V cache) or the plain path (two matrix products
and a softmax, with the V cache stored transposed). Which is faster depends on
the machine, the model, the cache's depth and a forward's width. Measured on
two cores of an Intel Xeon with the embedded model (`llama-bench`, ids/s)::

    forward             flash, f16   flash, q8_0   plain, f16
    1 id at depth 0        196          189           163
    1 id at depth 3k        24           49            57
    16 ids at depth 3k      30           80           161
    512 ids at depth 3k    213           78           172

so each `AttentionPath` the build allows is timed at load
(`ffwd.engine.cost.measure.measure_paths`: a `CostSurface` each, with the compute
and cache memory llama.cpp reserved),
and `choose` takes the one with the least expected time for a serving `Mix`,
within a memory bound. The result, an `AttentionTable`, is cached with the
cost surface (`ffwd.models`) and printed by `ffwd info`, the server's banner
and the bench report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ffwd.engine.cost.surface import CostSurface

# The path taken where no quiet measurement chooses one: llama.cpp's own default, and with the
# shape-invariant kernel (patches/llama.cpp) exact and the fastest measured for every forward.
DEFAULT = "flash/f16"


@dataclass(frozen=True, slots=True)
class AttentionPath:
    """Flash attention on or off, and the KV cache's type."""

    flash: bool
    kv: str

    @property
    def name(self) -> str:
        return f"{'flash' if self.flash else 'plain'}/{self.kv}"

    def exact(self, invariant: bool) -> bool:
        """Whether, on the CPU, a row's logits on this path do not depend on the forward it
        is in (how many ids, threads, micro-batches, other sequences): flash attention
        with the shape-invariant kernel (`invariant`: ``patches/llama.cpp``) on any cache;
        without it only on q8_0 or bf16, where ggml runs its per-row kernel for every shape.
        The plain path's matrix products take other kernels for one row than for many.

        >>> AttentionPath(True, "f16").exact(True), AttentionPath(True, "f16").exact(False)
        (True, False)
        >>> AttentionPath(True, "q8_0").exact(False), AttentionPath(False, "f16").exact(True)
        (True, False)
        """
        return self.flash and (invariant or self.kv in ("q8_0", "bf16"))

    @classmethod
    def parse(cls, name: str) -> AttentionPath:
        flash, _, kv = name.partition("/")
        if flash not in ("flash", "plain") or not kv:
            raise ValueError(f"attention path {name!r}: expected flash/KV or plain/KV")
        return cls(flash == "flash", kv)


def candidates(flash: str, kv_cache: str, exact_kv: str | None,
               invariant: bool = False) -> list[AttentionPath]:
    """The paths to time for the settings `flash` (auto|on|off) and `kv_cache`
    (auto or a type). `exact_kv` is set under `--deterministic`: the cache type the
    model's heads fit (q8_0, else bf16); only exact paths are timed then
    (`AttentionPath.exact`): with the shape-invariant kernel (`invariant`) flash
    attention on f16 and on that type, without it on that type and bf16.

    >>> [p.name for p in candidates("auto", "auto", None)]
    ['flash/f16', 'flash/q8_0', 'plain/f16']
    >>> [p.name for p in candidates("off", "auto", None)]
    ['plain/f16']
    >>> [p.name for p in candidates("auto", "auto", "q8_0")]
    ['flash/q8_0', 'flash/bf16']
    >>> [p.name for p in candidates("auto", "auto", "q8_0", invariant=True)]
    ['flash/f16', 'flash/q8_0']
    """
    if exact_kv is not None:
        auto = ["f16", exact_kv] if invariant else [exact_kv, "bf16"]
        kvs = [kv_cache] if kv_cache != "auto" else list(dict.fromkeys(auto))
        return [AttentionPath(True, kv) for kv in kvs]
    kvs = ["f16", "q8_0"] if kv_cache == "auto" else [kv_cache]
    paths = [AttentionPath(True, kv) for kv in kvs] if flash != "off" else []
    if flash != "on":  # the plain path cannot read a quantized V cache
        paths += [AttentionPath(False, kv) for kv in kvs if kv in ("f16", "bf16")]
    if not paths:
        raise ValueError(f"FFWD_FLASH_ATTN=off needs an f16 or bf16 KV cache, not {kv_cache}")
    return paths


@dataclass(frozen=True, slots=True)
class Mix:
    """The serving mix a path is chosen for: agent turns of `prompt` new ids at each
    of `depths` (clipped to the context window), then `output` ids, of which
    `span_share` come in fill's multi-id forwards of `span` ids (the rest one at a
    time)."""

    prompt: int = 1024
    output: int = 200
    depths: tuple[int, ...] = (1024, 4096)
    span: int = 8
    span_share: float = 0.3

    def describe(self) -> str:
        return (f"agent turns of {self.prompt} new prompt ids at depths "
                f"{', '.join(map(str, self.depths))} then {self.output} output ids, "
                f"{self.span_share:.0%} of them in {self.span}-id forwards")


def turn_ms(surface: CostSurface, mix: Mix, window: int) -> float:
    """Expected ms of the mix's turns on `surface`, averaged over its depths.

    >>> s = CostSurface({0: {1: 10.0, 9: 30.0}}, {0: {1: 10.0, 9: 28.0, 512: 600.0}}, 512)
    >>> turn_ms(s, Mix(prompt=1024, output=100, depths=(0,), span=8, span_share=0.4), 8192)
    1950.0
    """
    total = 0.0
    for start in mix.depths:
        depth = max(0, min(start, window - mix.prompt - mix.output))
        # 1. the prompt, in chunks of the backend's largest forward.
        done = 0
        while done < mix.prompt:
            n = min(surface.max_append, mix.prompt - done)
            total += surface.quiet(n, "last", depth + done)
            done += n
        # 2. the output: one-id steps, and fill's spans riding on a sampled id.
        depth += mix.prompt
        spans = mix.output * mix.span_share / mix.span
        steps = mix.output * (1 - mix.span_share)
        total += steps * surface.quiet(1, "last", depth)
        total += spans * surface.quiet(1 + mix.span, "rows", depth)
    return total / len(mix.depths)


@dataclass(slots=True)
class Measured:
    """One path as measured: its surface (None: it could not run), the MiB llama.cpp
    reserved for its KV cache and compute buffers, and its rounding: how far a verify
    forward moved the gap between the two best logits against one-id forwards, in logits
    (`ffwd.engine.cost.measure.measure_margin`; 0.0 where they agreed exactly)."""

    surface: CostSurface | None
    memory_mib: float
    note: str = ""
    margin: float = 0.0


@dataclass(slots=True)
class AttentionTable:
    """Every candidate path as measured, and the one chosen (with why)."""

    paths: dict[str, Measured]
    chosen: str
    why: str
    mix: Mix = field(default_factory=Mix)

    def __post_init__(self) -> None:
        AttentionPath.parse(self.chosen)  # a ValueError naming it
        if self.chosen not in self.paths or self.paths[self.chosen].surface is None:
            raise ValueError(f"attention table: the chosen path {self.chosen!r} was not "
                             f"measured (measured: {', '.join(self.paths) or 'none'})")

    def describe(self, window: int) -> list[str]:
        """A few lines: per path the ms of a one-id step and a 16-id forward at each
        measured depth, the mix's expected turn, its memory; then the choice."""
        out = []
        for name, m in self.paths.items():
            mark = "*" if name == self.chosen else " "
            if m.surface is None:
                out.append(f" {mark} {name:<11} {m.note}")
                continue
            s = m.surface
            cells = ", ".join(f"d{d}: {s.quiet(1, 'last', d):.1f}/{s.quiet(16, 'rows', d):.0f}"
                              for d in s.depths)
            rounds = f"rounds {m.margin:.2f} logits apart" if m.margin else "exact here"
            out.append(f" {mark} {name:<11} ms per 1 id/16 ids {cells}; turn "
                       f"{turn_ms(s, self.mix, window) / 1000:.2f} s; {m.memory_mib:.0f} MiB; "
                       f"{rounds}" + (f" ({m.note})" if m.note else ""))
        return [*out, f"   chosen: {self.chosen} ({self.why})"]

    def after_busy(self, quiet: AttentionTable | None, share: float) -> AttentionTable:
        """What serves when this table was measured while other processes used `share` of
        the CPUs (its times are theirs as much as the paths'): the last quiet table
        (`quiet`) where there is one, else these surfaces with the stated default chosen
        (`DEFAULT`, where it ran; else the first path that ran), each saying so."""
        busy = f"timed again while other processes used {share:.0%} of the CPUs"
        if quiet is not None:
            return AttentionTable(quiet.paths, quiet.chosen,
                                  f"the last quiet measurement: {quiet.why}; {busy}", quiet.mix)
        ran = [n for n, m in self.paths.items() if m.surface is not None]
        if not ran:
            return self
        chosen = DEFAULT if DEFAULT in ran else ran[0]
        return AttentionTable(self.paths, chosen, f"the stated default, not the timings: {busy} "
                              f"and none timed on a quiet machine", self.mix)

    def as_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "why": self.why, "paths": {
            name: {"surface": m.surface.as_dict() if m.surface else None,
                   "memory_mib": m.memory_mib, "note": m.note, "margin": m.margin}
            for name, m in self.paths.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AttentionTable:
        paths = {name: Measured(CostSurface.from_dict(m["surface"]) if m["surface"] else None,
                                float(m["memory_mib"]), str(m.get("note", "")),
                                float(m["margin"]))
                 for name, m in d["paths"].items()}
        return cls(paths, str(d["chosen"]), str(d["why"]))


def choose(paths: Mapping[str, Measured], mix: Mix, window: int,
           memory_bound_mib: float) -> tuple[str, str]:
    """The path with the least expected time for `mix` among those that ran and fit in
    `memory_bound_mib`, and why; ties go to the first listed.

    >>> fast = CostSurface({0: {1: 5.0, 9: 9.0}}, {0: {1: 5.0, 512: 900.0}}, 512)
    >>> slow = CostSurface({0: {1: 9.0, 9: 20.0}}, {0: {1: 9.0, 512: 800.0}}, 512)
    >>> choose({"a": Measured(slow, 100), "b": Measured(fast, 9000)}, Mix(), 8192, 4096)
    ('a', 'the least expected time of those that fit in 4096 MiB (b needs 9000 MiB)')
    """
    fits = {n: m for n, m in paths.items() if m.surface is not None
            and m.memory_mib <= memory_bound_mib}
    if not fits:
        raise RuntimeError("no attention path could run here: "
                           + "; ".join(f"{n}: {m.note or 'too large'}" for n, m in paths.items()))
    times = {n: turn_ms(m.surface, mix, window) for n, m in fits.items() if m.surface}
    best = min(times, key=times.__getitem__)
    left = [f"{n} needs {m.memory_mib:.0f} MiB" for n, m in paths.items()
            if m.surface is not None and n not in fits]
    why = f"the least expected time of those that fit in {memory_bound_mib:.0f} MiB"
    return best, why + (f" ({'; '.join(left)})" if left else "")
