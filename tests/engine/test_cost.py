"""Cost surfaces: measured on a real (tiny) backend, cached, interpolated, kept current."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import ffwd.models.costs
from ffwd.engine.cost.measure import measure
from ffwd.engine.cost.surface import CostSurface, flat
from ffwd.engine.llama.threads import Contention
from ffwd.fill.spans import POINTS, Undo, choose_span
from ffwd.models import load_or_measure, read_cost_curve
from tests.engine.tiny_models import tiny_backend


def test_measure_covers_every_point_and_leaves_the_cache_empty() -> None:
    b = tiny_backend("llama")
    surface = measure(b, context=16, repeats=1, depths=())
    assert surface.depths == [16]
    assert sorted(surface.rows[16]) == list(POINTS)  # up to the longest span fill forwards
    assert sorted(surface.last[16]) == sorted({*POINTS, b.max_append})  # and a prefill chunk
    assert all(ms > 0 for by_m in (surface.rows, surface.last) for ms in by_m[16].values())
    assert surface.undo == Undo() and surface.max_append == b.max_append
    assert b.cache_len == 0


def test_measure_times_the_widths_and_a_prefill_chunk_at_each_depth() -> None:
    b = tiny_backend("llama")  # 64-id chunks, a context of 512
    surface = measure(b, context=16, repeats=1, depths=(128, 256), widths=(1, 4), budget_s=60)
    assert surface.depths == [16, 128, 256]
    assert sorted(surface.last[128]) == [1, 4, b.max_append]  # the chunk that started there
    assert sorted(surface.rows[256]) == [1, 4]
    # Rows at depth: the last row measured there plus the head's excess measured shallow.
    excess = surface.rows[16][4] - surface.last[16][4]
    assert surface.rows[128][4] == pytest.approx(surface.last[128][4] + max(0.0, excess))
    assert b.cache_len == 0


def test_measure_stops_growing_where_the_budget_runs_out() -> None:
    b = tiny_backend("llama")
    surface = measure(b, context=16, repeats=1, depths=(128, 256), widths=(1,), budget_s=0.0)
    assert surface.depths == [16]  # priced from the shallow depth everywhere


def test_measure_prices_restore_where_the_cache_cannot_rewind() -> None:
    b = tiny_backend("qwen3_next")
    surface = measure(b, context=16, repeats=1, points=(1, 2, 4))
    assert surface.undo.replay and surface.undo.after > 0 and surface.undo.before > 0
    assert surface.depths == [16]  # nothing to grow through without a rewind


def test_one_id_at_a_time_backends_cannot_forward_spans() -> None:
    b = tiny_backend("mamba")
    surface = measure(b, context=8, repeats=1, points=(1, 2, 4))
    assert list(surface.rows[8]) == [1]
    assert math.isinf(surface.cost(2))


def test_interpolation_in_width_and_depth_and_the_running_level() -> None:
    s = CostSurface({0: {1: 10.0, 4: 16.0}, 1000: {1: 20.0, 4: 40.0}},
                    {0: {1: 10.0, 4: 13.0}, 1000: {1: 20.0, 4: 30.0}}, max_append=64)
    assert s.cost(2) == pytest.approx(12.0)
    assert s.cost(2, "last") == pytest.approx(11.0)
    assert s.cost(4, depth=500) == pytest.approx(28.0)  # halfway between the depths
    assert s.cost(4, depth=2000) == pytest.approx(64.0)  # the last slope carried on
    for _ in range(200):  # the machine got twice as slow
        s.observe(1, 40.0, "last", depth=1000)
    assert s.cost(1) == pytest.approx(20.0, rel=0.01)  # the whole surface moved
    assert s.cost(4, depth=1000) == pytest.approx(80.0, rel=0.01)
    assert math.isinf(s.cost(65))
    with pytest.raises(ValueError):
        s.cost(0)


def test_a_span_is_priced_at_the_depth_it_runs_at() -> None:
    # Shaped as measured on two cores with flash attention on an f16 cache: at depth 0 a
    # 16-id forward costs 6 one-id steps, at depth 3k it costs 12.
    s = CostSurface({0: {1: 10.0, 4: 21.0, 8: 36.0, 16: 60.0},
                     3000: {1: 45.0, 4: 150.0, 8: 290.0, 16: 540.0}},
                    {0: {1: 10.0, 16: 55.0}, 3000: {1: 45.0, 16: 530.0}}, max_append=512)
    accept = [0.8] * 16
    shallow = choose_span(s.at(0), accept, 16)
    deep = choose_span(s.at(3000), accept, 16)
    assert shallow.length > deep.length > 0
    assert choose_span(s.at(3000), [0.6] * 16, 16).length == 0  # declined deep, not shallow
    assert choose_span(s.at(0), [0.6] * 16, 16).length > 0


def test_a_noisy_point_never_prices_a_longer_span_below_a_shorter_one() -> None:
    # One busy sample made 2 ids dearer than 4 (a table timed on q8_0, depth 96): pooled,
    # the 2-id and 4-id forwards cost the same and neither more than 8 ids.
    s = CostSurface({96: {1: 8.6, 2: 21.8, 4: 18.2, 8: 30.0}},
                    {96: {1: 8.6, 2: 21.8, 4: 18.2, 8: 30.0}}, max_append=64)
    assert s.cost(2) == pytest.approx(20.0) == s.cost(4)
    for kind in ("rows", "last"):
        by_m = [s.cost(m, kind, 96) for m in range(1, 65)]
        assert by_m == sorted(by_m)
    assert CostSurface.from_dict(s.as_dict()).rows == s.rows  # and so once cached


def test_the_two_timings_of_a_one_id_forward_are_one_forward() -> None:
    # A plain step asks for the last row, a verify of nothing more for every row: with one
    # id they are the same forward, so a noisy pair must not make verifying look cheap.
    s = CostSurface({96: {1: 12.9, 2: 16.3}}, {96: {1: 10.7, 2: 15.8}}, max_append=64)
    assert s.cost(1) == s.cost(1, "last") == pytest.approx(11.8)


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        flat({1: 0.0}, {1: 1.0}, max_append=8)
    with pytest.raises(ValueError, match="depths"):
        CostSurface({0: {1: 1.0}}, {5: {1: 1.0}}, max_append=8)


def test_load_or_measure_caches_the_surface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ffwd.models.costs, "BUSY", 1.01)  # kept however busy this machine is
    path = tmp_path / "curves" / "tiny.json"
    first = load_or_measure(tiny_backend("llama"), path)
    assert path.exists()
    again = load_or_measure(tiny_backend("llama"), path)
    assert again.as_dict() == first.as_dict()
    path.write_text("{not json")  # a damaged file is measured again, not an error
    assert load_or_measure(tiny_backend("llama"), path).rows.keys() == first.rows.keys()


def test_a_surface_measured_on_busy_cores_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Contention, "share", lambda self: 0.6)
    path = tmp_path / "curves" / "tiny.json"
    surface = load_or_measure(tiny_backend("llama"), path)
    assert surface.rows and not path.exists()
    assert "not cached" in caplog.text and "60%" in caplog.text
    monkeypatch.setattr(Contention, "share", lambda self: 0.05)
    load_or_measure(tiny_backend("llama"), path)
    assert path.exists()


def test_a_busy_measurement_gives_way_to_the_last_quiet_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A measurement asked for again (`refresh`) on busy cores keeps the quiet one cached,
    and the caller's `busy` decides what serves."""
    path = tmp_path / "curves" / "tiny.json"
    monkeypatch.setattr(Contention, "share", lambda self: 0.05)
    quiet = load_or_measure(tiny_backend("llama"), path)
    monkeypatch.setattr(Contention, "share", lambda self: 0.7)
    again = load_or_measure(tiny_backend("llama"), path, refresh=True)
    assert again.as_dict() == quiet.as_dict() and "last quiet measurement" in caplog.text
    seen: list[tuple[bool, float]] = []

    def busy(found: object, last: object, share: float) -> str:
        seen.append((last is not None, share))
        return "decided"

    assert load_or_measure(tiny_backend("llama"), path, refresh=True, busy=busy) == "decided"
    assert seen == [(True, 0.7)]
    assert read_cost_curve(path).as_dict() == quiet.as_dict()  # the cache is untouched
