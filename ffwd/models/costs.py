"""Measured forward costs, cached per model and everything that changes them.

On llama.cpp that is an `AttentionTable` (every attention path's cost surface,
the one chosen), keyed on the library's build line, the CPU, where the layers
run, the threads, the context, the batch and the attention settings; on
transformers a `CostSurface`, keyed on dtype, device and threads. A
measurement made while other processes used more than `BUSY` of the CPUs is
not cached, and is not trusted either: a load takes the last quiet measurement
cached for the same settings where there is one (``--measure-cost`` on a busy
machine keeps it), else the busy one, through `busy` where the caller has a
stated default for that case (the attention path: `AttentionTable.after_busy`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ffwd.config import cache_dir
from ffwd.engine.llama.threads import BUSY
from ffwd.models.cache import read_cached, read_json, write_json
from ffwd.models.files import ModelRef

log = logging.getLogger("ffwd.models")
# The cached files' layout (2: surfaces by depth, attention tables; 3: timed at 64 ids,
# each path's rounding margin).
SCHEMA = 3


def cost_curve_path(ref: ModelRef, backend: str, parts: Sequence[object]) -> Path:
    """Where a model's measured costs are cached for the settings in `parts`."""
    digest = hashlib.sha256("\n".join(map(str, (SCHEMA, *parts))).encode()).hexdigest()
    return cache_dir() / "costs" / f"{ref.cache_key}-{backend}-{digest[:20]}.json"


def llama_cost_parts(*, device: str, threads: int, n_ctx: int, n_batch: int, kv_cache: str,
                     flash_attn: str, deterministic: bool) -> tuple[object, ...]:
    """What a llama.cpp measurement depends on besides the model: the build, the CPU,
    where the layers run (`device`) and the settings."""
    from ffwd.engine.llama.native import cpu_model, system_info

    return (system_info(), cpu_model(), device, threads, n_ctx, n_batch, kv_cache, flash_attn,
            deterministic)


def read_cost_curve(path: Path) -> Any:
    """What is cached at `path` (an `AttentionTable` or a `CostSurface`), or None when
    nothing is (or, logged and removed, it cannot be read)."""
    return read_cached(path, _cost_curve, "measured forward costs")


def _cost_curve(path: Path) -> Any:
    from ffwd.engine.cost.surface import CostSurface
    from ffwd.engine.llama.attention import AttentionTable

    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return AttentionTable.from_dict(data) if "chosen" in data else CostSurface.from_dict(data)


def load_or_measure(backend: Any, path: Path, refresh: bool = False,
                    measure: Callable[[Any], Any] | None = None,
                    busy: Callable[[Any, Any, float], Any] | None = None) -> Any:
    """What is cached at `path`, or (none there, or `refresh`) `measure(backend)` (default:
    `ffwd.engine.cost.measure.measure`), saved there atomically unless other processes used
    more than `BUSY` of the machine meanwhile. Then it is not saved, and what serves is
    ``busy(measured, quiet, share)`` (`quiet`: what is cached at `path`, None if nothing),
    by default the quiet one where there is one, else the busy one; the next load measures
    again."""
    from ffwd.engine.cost.measure import measure as measure_surface
    from ffwd.engine.llama.threads import Contention

    found = None if refresh else read_cost_curve(path)
    if found is not None:
        return found
    watch = Contention()
    found = (measure or measure_surface)(backend)
    share = watch.share()
    if share is not None and share > BUSY:
        quiet = read_cost_curve(path)
        log.warning("the forward costs were measured while other processes used %.0f%% of "
                    "the CPUs: they are not cached, and %s (a load on a quieter machine "
                    "measures them again)", 100 * share,
                    "the last quiet measurement serves instead" if quiet is not None else
                    "serve this process only")
        if busy is not None:
            return busy(found, quiet, share)
        return quiet if quiet is not None else found
    write_json(path, found.as_dict(), "measured forward costs")
    return found
