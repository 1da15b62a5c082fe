"""The measured forward cost curves, cached per model, engine, dtype, device and threads."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from ffwd.config import cache_dir
from ffwd.engine.threads import BUSY
from ffwd.models.files import ModelRef

log = logging.getLogger("ffwd.models")


def cost_curve_path(ref: ModelRef, backend: str, dtype: str, device: str, threads: int) -> Path:
    """Where a model's measured forward costs are cached (per backend, dtype, device, threads)."""
    return cache_dir() / "costs" / f"{ref.cache_key}-{backend}-{dtype}-{device}-t{threads}.json"


def read_cost_curve(path: Path) -> Any:
    """The `CostCurve` cached at `path`, or None when there is none (or it is damaged)."""
    from ffwd.engine.cost import CostCurve

    try:
        return CostCurve.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, AssertionError, TypeError):
        return None


def load_or_measure(backend: Any, path: Path, refresh: bool = False) -> Any:
    """The `CostCurve` cached at `path`, or (none there, or `refresh`) a fresh
    `ffwd.engine.measure.measure`, saved there atomically unless other processes used
    more than `BUSY` of the machine meanwhile: then it serves this process only, and the
    next load measures again."""
    from ffwd.engine.measure import measure
    from ffwd.engine.threads import Contention

    curve = None if refresh else read_cost_curve(path)
    if curve is not None:
        return curve
    watch = Contention()
    curve = measure(backend)
    share = watch.share()
    if share is not None and share > BUSY:
        log.warning("the forward cost curve was measured while other processes used %.0f%% of "
                    "the CPUs: it is not cached (a load on a quieter machine measures it again)",
                    100 * share)
        return curve
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(curve.as_dict(), fh)
    os.replace(tmp, path)
    return curve
