"""ffwd.config: every FFWD_FILL* variable, overrides, and the errors they raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from ffwd.config import (
    FillConfig,
    SettingError,
    cache_dir,
    resolve_fill_config,
    resolve_fill_mode,
)


@pytest.mark.parametrize(
    ("raw", "mode"),
    [(None, "off"), ("", "off"), ("off", "off"), ("0", "off"), ("strict", "strict"),
     ("1", "strict"), ("echo", "echo"), (" ECHO ", "echo")],
)
def test_resolve_fill_mode(raw: str | None, mode: str) -> None:
    assert resolve_fill_mode(raw) == mode


@pytest.mark.parametrize("raw", ["on", "2", "yes", "strict,echo", 1])
def test_resolve_fill_mode_rejects_with_the_variable_name(raw: object) -> None:
    with pytest.raises(ValueError, match=r"FFWD_FILL=.*expected off\|strict\|echo"):
        resolve_fill_mode(raw)


def test_defaults_are_the_measured_ones() -> None:
    # k and candidates come from the issue-11 sweep (DESIGN's first guess was 8 and 24).
    c = resolve_fill_config({})
    assert c == FillConfig()
    assert (c.mode, c.max_span, c.append_chunk_size, c.k, c.candidates, c.index_max) == (
        "off", 64, 0, 3, 8, 131072)
    assert c.trace is False and c.echo_config() is None and not c.strict_rows


def test_environment_values_are_parsed() -> None:
    env = {
        "FFWD_FILL": "echo", "FFWD_FILL_MAX_SPAN": "16", "FFWD_FILL_APPEND_CHUNK_SIZE": "4",
        "FFWD_FILL_K": "6", "FFWD_FILL_CANDIDATES": "3", "FFWD_FILL_INDEX_MAX": "2048",
        "FFWD_FILL_TRACE": "/tmp/x.jsonl",
    }
    c = resolve_fill_config(env)
    assert (c.mode, c.max_span, c.append_chunk_size, c.k, c.candidates, c.index_max) == (
        "echo", 16, 4, 6, 3, 2048)
    assert c.trace_path == "/tmp/x.jsonl" and c.trace_checks
    e = c.echo_config()
    assert e is not None and (e.k, e.max_span, e.max_candidates, e.index_max) == (6, 16, 3, 2048)


@pytest.mark.parametrize(
    ("var", "value", "accepted"),
    [("FFWD_FILL_MAX_SPAN", "1", "from 2 to 4096"), ("FFWD_FILL_MAX_SPAN", "ten", "from 2"),
     ("FFWD_FILL_APPEND_CHUNK_SIZE", "-1", "from 0"), ("FFWD_FILL_K", "1", "from 2 to 64"),
     ("FFWD_FILL_CANDIDATES", "0", "from 1 to 1024"), ("FFWD_FILL_INDEX_MAX", "100", "from 1024"),
     ("FFWD_FILL_K", "3.5", "from 2"), ("FFWD_FILL_K", "1000000000000", "to 64"),
     ("FFWD_FILL_INDEX_MAX", "9" * 5000, "from 1024")],
)
def test_bad_values_name_variable_value_and_range(var: str, value: str, accepted: str) -> None:
    with pytest.raises(ValueError) as exc:
        resolve_fill_config({var: value})
    msg = str(exc.value)
    assert var in msg and repr(value)[:20] in msg and accepted in msg


def test_trace_values() -> None:
    assert resolve_fill_config({"FFWD_FILL_TRACE": "1"}).trace is True
    assert resolve_fill_config({"FFWD_FILL_TRACE": "0"}).trace is False
    c = resolve_fill_config({"FFWD_FILL_TRACE": "1"})
    assert c.trace_checks and c.trace_path is None


def test_overrides_apply_on_top_of_the_environment() -> None:
    c = resolve_fill_config({"FFWD_FILL": "strict", "FFWD_FILL_K": "4"},
                            {"fill": "echo", "max_span": 8, "k": None})
    assert (c.mode, c.max_span, c.k) == ("echo", 8, 4)
    assert c.with_overrides({"candidates": "5"}).candidates == 5


def test_override_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown fill setting 'spam'.*max_span"):
        FillConfig().with_overrides({"spam": 1})
    with pytest.raises(ValueError, match="FFWD_FILL_MAX_SPAN=True"):
        FillConfig().with_overrides({"max_span": True})
    with pytest.raises(ValueError, match="FFWD_FILL="):
        FillConfig().with_overrides({"fill": "fast"})


def test_cache_dir(tmp_path: Path) -> None:
    assert cache_dir({"FFWD_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "ffwd"
    assert cache_dir({}).name == "ffwd"


def test_no_other_module_reads_the_environment() -> None:
    root = Path(__file__).resolve().parents[2] / "ffwd"
    offenders = [
        str(p.relative_to(root)) for p in root.rglob("*.py")
        if p.parent.name != "config"
        and ("os.environ" in p.read_text() or "getenv" in p.read_text())
    ]
    assert offenders == []


def test_default_mode_applies_only_when_nothing_says_which() -> None:
    assert resolve_fill_config({}, default_mode="echo").mode == "echo"
    assert resolve_fill_config({"FFWD_FILL": "off"}, default_mode="echo").mode == "off"
    assert resolve_fill_config({}, {"fill": "strict"}, default_mode="echo").mode == "strict"


def test_request_overrides_are_typed_and_bounded() -> None:
    base = FillConfig(mode="echo")
    c = base.for_request({"fill": "strict", "k": 4, "max_span": None})
    assert (c.mode, c.k, c.max_span) == ("strict", 4, 64)
    for body, name, needle in [
        ({"k": "4"}, "ffwd.k", "a JSON integer"),
        ({"k": True}, "ffwd.k", "a JSON integer"),
        ({"k": 1_000_000_000_000}, "ffwd.k", "from 2 to 64"),
        ({"candidates": 10**6}, "ffwd.candidates", "to 1024"),
        ({"fill": 1}, "ffwd.fill", "a JSON string"),
        ({"fill": "turbo"}, "ffwd.fill", "off|strict|echo"),
        ({"spam": 1}, "ffwd.spam", "expected one of fill, max_span"),
    ]:
        with pytest.raises(SettingError) as exc:
            base.for_request(body)
        assert exc.value.name == name and needle in str(exc.value), str(exc.value)


def test_a_request_never_names_a_trace_file(tmp_path: Path) -> None:
    target = tmp_path / "new" / "file.jsonl"
    for raw in (str(target), "1", 1):
        with pytest.raises(SettingError, match=r"ffwd\.trace"):
            FillConfig().for_request({"trace": raw})
    assert not target.parent.exists()
    # Tracing is the operator's: a request may switch it off, or on only when configured.
    served = FillConfig(trace="/srv/trace.jsonl")
    assert served.for_request({"trace": False}).trace is False
    assert served.for_request({"trace": True}).trace == "/srv/trace.jsonl"
    with pytest.raises(SettingError, match="tracing is off on this server"):
        FillConfig().for_request({"trace": True})
