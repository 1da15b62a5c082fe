"""The attention path: which ones are timed, and which one a serving mix picks."""

from __future__ import annotations

import pytest

from ffwd.config import SettingError, resolve_engine_config
from ffwd.engine.cost.surface import CostSurface
from ffwd.engine.llama.attention import (
    AttentionPath,
    AttentionTable,
    Measured,
    Mix,
    candidates,
    choose,
    turn_ms,
)


def surface(step: dict[int, float], span16: dict[int, float], chunk: dict[int, float]) -> \
        CostSurface:
    """ms of a one-id step, a 16-id forward and a 512-id chunk, by depth."""
    return CostSurface({d: {1: step[d], 16: span16[d]} for d in step},
                       {d: {1: step[d], 16: span16[d], 512: chunk[d]} for d in step}, 512)


# Shaped like llama-bench on two Xeon cores with the embedded model (ms).
FLASH = surface({0: 5.1, 3000: 42.0}, {0: 44.0, 3000: 530.0}, {0: 1310.0, 3000: 2400.0})
PLAIN = surface({0: 6.1, 3000: 17.4}, {0: 50.0, 3000: 100.0}, {0: 1450.0, 3000: 2980.0})


def test_the_paths_timed_follow_the_settings() -> None:
    assert [p.name for p in candidates("auto", "auto", None)] == [
        "flash/f16", "flash/q8_0", "plain/f16"]
    assert [p.name for p in candidates("on", "auto", None)] == ["flash/f16", "flash/q8_0"]
    assert [p.name for p in candidates("auto", "q8_0", None)] == ["flash/q8_0"]
    assert [p.name for p in candidates("auto", "bf16", None)] == ["flash/bf16", "plain/bf16"]
    # --deterministic: exact paths only (flash attention's per-row kernel).
    assert [p.name for p in candidates("auto", "auto", "bf16")] == ["flash/bf16"]
    # ... and with the shape-invariant kernel every flash path is exact, f16 first.
    assert [p.name for p in candidates("auto", "auto", "q8_0", invariant=True)] == [
        "flash/f16", "flash/q8_0"]
    assert [p.name for p in candidates("auto", "f16", "q8_0", invariant=True)] == ["flash/f16"]
    with pytest.raises(ValueError, match="FFWD_FLASH_ATTN=off"):
        candidates("off", "q8_0", None)
    assert AttentionPath.parse("plain/f16") == AttentionPath(False, "f16")
    with pytest.raises(ValueError):
        AttentionPath.parse("fast")


def test_deep_agent_turns_choose_the_path_that_decodes_fast_at_depth() -> None:
    paths = {"flash/f16": Measured(FLASH, 278), "plain/f16": Measured(PLAIN, 346)}
    chosen, why = choose(paths, Mix(), 8192, 4096)
    assert chosen == "plain/f16" and "4096 MiB" in why
    assert turn_ms(PLAIN, Mix(), 8192) < turn_ms(FLASH, Mix(), 8192)


def test_a_prefill_heavy_mix_at_depth_zero_keeps_flash_attention() -> None:
    mix = Mix(prompt=4096, output=8, depths=(0,))
    paths = {"flash/f16": Measured(FLASH, 278), "plain/f16": Measured(PLAIN, 346)}
    assert choose(paths, mix, 8192, 4096)[0] == "flash/f16"


def test_memory_and_failures_rule_paths_out() -> None:
    paths = {"flash/f16": Measured(FLASH, 278), "plain/f16": Measured(PLAIN, 5000),
             "flash/q8_0": Measured(None, 0.0, "unavailable: no context")}
    chosen, why = choose(paths, Mix(), 8192, 4096)
    assert chosen == "flash/f16" and "plain/f16 needs 5000 MiB" in why
    with pytest.raises(RuntimeError, match="no context"):
        choose({"flash/q8_0": paths["flash/q8_0"]}, Mix(), 8192, 4096)


def test_the_table_survives_its_cache_and_says_what_it_chose() -> None:
    table = AttentionTable({"flash/f16": Measured(FLASH, 278), "plain/f16": Measured(PLAIN, 346),
                            "flash/q8_0": Measured(None, 0.0, "unavailable: x")},
                           "plain/f16", "why")
    again = AttentionTable.from_dict(table.as_dict())
    assert again.as_dict() == table.as_dict()
    lines = again.describe(8192)
    assert lines[-1] == "   chosen: plain/f16 (why)"
    assert any(line.startswith(" * plain/f16") for line in lines)
    assert any("unavailable: x" in line for line in lines)


def test_flash_attention_is_a_setting_and_deterministic_refuses_the_plain_path() -> None:
    assert resolve_engine_config({"FFWD_FLASH_ATTN": "OFF"}).flash_attn == "off"
    assert resolve_engine_config({}).flash_attn == "auto"
    with pytest.raises(SettingError, match="FFWD_FLASH_ATTN"):
        resolve_engine_config({"FFWD_FLASH_ATTN": "sometimes"})
    with pytest.raises(SettingError, match="FFWD_FLASH_ATTN"):
        resolve_engine_config({"FFWD_FLASH_ATTN": "off", "FFWD_DETERMINISTIC": "1"})


def test_only_flash_attention_is_exact_and_on_f16_only_with_the_kernel() -> None:
    for kv in ("f16", "q8_0", "bf16"):
        assert AttentionPath(True, kv).exact(invariant=True)
        assert not AttentionPath(False, kv).exact(invariant=True)
    assert not AttentionPath(True, "f16").exact(invariant=False)
    assert AttentionPath(True, "q8_0").exact(invariant=False)


def test_timings_from_a_busy_machine_do_not_choose() -> None:
    """The plain path measured fastest while others used the cores: the choice is the
    last quiet table where there is one, else the stated default, and it says which."""
    busy = AttentionTable({"flash/f16": Measured(FLASH, 278), "plain/f16": Measured(PLAIN, 346)},
                          "plain/f16", "the least expected time")
    fallback = busy.after_busy(None, 0.8)
    assert fallback.chosen == "flash/f16" and "stated default" in fallback.why
    assert "80%" in fallback.why and fallback.paths == busy.paths
    quiet = AttentionTable({"flash/f16": Measured(FLASH, 278)}, "flash/f16", "measured here")
    kept = busy.after_busy(quiet, 0.8)
    assert kept.chosen == "flash/f16" and kept.paths == quiet.paths
    assert kept.why.startswith("the last quiet measurement: measured here")
    # where the default did not run, the first path that did
    only_plain = AttentionTable({"flash/f16": Measured(None, 0.0, "unavailable"),
                                 "plain/f16": Measured(PLAIN, 346)}, "plain/f16", "x")
    assert only_plain.after_busy(None, 0.5).chosen == "plain/f16"
