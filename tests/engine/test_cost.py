"""Cost curves: measured on a real (tiny) backend, cached, interpolated, kept current."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import ffwd.models.costs
from ffwd.engine.cost import CostCurve
from ffwd.engine.measure import measure
from ffwd.engine.threads import Contention
from ffwd.fill.spans import Undo
from ffwd.models import load_or_measure
from tests.engine.tiny_models import tiny_backend


def test_measure_covers_every_point_and_leaves_the_cache_empty() -> None:
    b = tiny_backend("llama")
    curve = measure(b, context=16, repeats=1)
    assert sorted(curve.rows) == sorted(curve.last) == [1, 2, 4, 8, 16, 32]
    assert all(ms > 0 for ms in [*curve.rows.values(), *curve.last.values()])
    assert curve.undo == Undo() and curve.max_append == b.max_append
    assert b.cache_len == 0


def test_measure_prices_restore_where_the_cache_cannot_rewind() -> None:
    b = tiny_backend("qwen3_next")
    curve = measure(b, context=16, repeats=1, points=(1, 2, 4))
    assert curve.undo.replay and curve.undo.after > 0 and curve.undo.before > 0


def test_one_id_at_a_time_backends_cannot_forward_spans() -> None:
    b = tiny_backend("mamba")
    curve = measure(b, context=8, repeats=1, points=(1, 2, 4))
    assert list(curve.rows) == [1]
    assert math.isinf(curve.cost(2))


def test_interpolation_and_the_running_level() -> None:
    curve = CostCurve({1: 10.0, 4: 16.0}, {1: 9.0, 4: 12.0}, max_append=64)
    assert curve.cost(2) == pytest.approx(12.0)
    assert curve.cost(2, "last") == pytest.approx(10.0)
    for _ in range(200):  # the machine got twice as slow
        curve.observe(1, 18.0, "last")
    assert curve.cost(1) == pytest.approx(20.0, rel=0.01)
    assert curve.cost(4) == pytest.approx(32.0, rel=0.01)  # the whole curve moved
    assert math.isinf(curve.cost(65))
    with pytest.raises(ValueError):
        curve.cost(0)


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        CostCurve({1: 0.0}, {1: 1.0}, max_append=8)


def test_load_or_measure_caches_the_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ffwd.models.costs, "BUSY", 1.01)  # kept however busy this machine is
    path = tmp_path / "curves" / "tiny.json"
    first = load_or_measure(tiny_backend("llama"), path)
    assert path.exists()
    again = load_or_measure(tiny_backend("llama"), path)
    assert again.as_dict() == first.as_dict()
    path.write_text("{not json")  # a damaged file is measured again, not an error
    assert load_or_measure(tiny_backend("llama"), path).rows.keys() == first.rows.keys()


def test_a_curve_measured_on_busy_cores_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Contention, "share", lambda self: 0.6)
    path = tmp_path / "curves" / "tiny.json"
    curve = load_or_measure(tiny_backend("llama"), path)
    assert curve.rows and not path.exists()
    assert "not cached" in caplog.text and "60%" in caplog.text
    monkeypatch.setattr(Contention, "share", lambda self: 0.05)
    load_or_measure(tiny_backend("llama"), path)
    assert path.exists()
