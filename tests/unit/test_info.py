"""`ffwd info` and the CLI's commands: every listed command is real, and info reports what
a model runs as, greedy determinism included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ffwd.cli import COMMANDS
from ffwd.cli import main as ffwd_main
from ffwd.engine.promise import greedy_promise


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_listed_command_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        ffwd_main([name, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ffwd {name}") and COMMANDS[name][1].split(":")[0] in out


@pytest.mark.parametrize(
    ("device", "dtype", "promised"),
    [("cpu", "float32", True), ("cpu", "bfloat16", False), ("cpu", "float16", False),
     ("cuda", "float32", False), ("cuda", "bfloat16", False)],
)
def test_greedy_promise(device: str, dtype: str, promised: bool) -> None:
    ok, text = greedy_promise("transformers", device, dtype)
    assert ok is promised and text.startswith("yes:" if promised else "no:")


def test_greedy_promise_on_llama_cpp_follows_the_path_and_the_build() -> None:
    for kv in ("q8_0", "bf16"):
        assert greedy_promise("llamacpp", "cpu", f"gguf-kv-{kv}", 2, invariant=False)[0] is True
    ok, text = greedy_promise("llamacpp", "cpu", "gguf-kv-f16", 1, invariant=False)
    assert ok is False and "--deterministic" in text and "4 argmax flips" in text
    ok, text = greedy_promise("llamacpp", "cpu", "gguf-kv-f16-noflash", 2, invariant=False)
    assert ok is False and "plain attention" in text and "32 argmax flips" in text
    # With the shape-invariant kernel (patches/llama.cpp) every flash path is exact ...
    for kv in ("f16", "q8_0", "bf16"):
        ok, text = greedy_promise("llamacpp", "cpu", f"gguf-kv-{kv}", 2, invariant=True)
        assert ok is True and text.startswith("yes:")
    assert "shape-invariant" in greedy_promise("llamacpp", "cpu", "gguf-kv-f16", 2, True)[1]
    assert greedy_promise("llamacpp", "cpu", "gguf-kv-f16-noflash", 2, invariant=True)[0] is False
    # ... on the CPU: a GPU chooses its kernels by batch shape, patched or not.
    ok, text = greedy_promise("llamacpp", "gpu", "gguf-kv-f16", 2, invariant=True)
    assert ok is False and "GPU" in text
    # Before the first load has chosen a path, what is known.
    ok, text = greedy_promise("llamacpp", "cpu", "gguf-kv-", 2, invariant=True)
    assert ok is False and text.startswith("not known until the first load")


def test_info_reports_the_resolved_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert ffwd_main(["info", "--json", "--dtype", "float32", "--device", "cpu",
                      "--threads", "1"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model"] == "SmolLM2-135M-Instruct" and Path(info["path"]).is_file()
    assert info["path"].endswith(".gguf") and info["size"].endswith("MiB")
    assert (info["backend"], info["device"], info["threads"]) == ("llamacpp", "cpu", "1")
    # The KV cache is the attention path's the first load measured fastest.
    assert info["dtype"].startswith("the GGUF file's own, KV cache ")
    assert info["tool_format"] == "hermes" and info["template"].startswith("builtin hermes")
    assert info["context_window"] == 8192 and info["vocab_size"] == 49152
    assert info["fill_served"] in ("off", "strict", "echo")
    if not info["greedy_deterministic"]:  # unless the path measured fastest is exact
        assert "--deterministic" in info["greedy_determinism"]
    assert info["engine_check"].startswith("ok") and "CPU" in info["layout"]
    assert "AVX" in info["llama_cpp_build"] or "NEON" in info["llama_cpp_build"]
    assert ffwd_main(["info", "--json", "--threads", "1", "--deterministic"]) == 0
    exact = json.loads(capsys.readouterr().out)
    # the exact paths: flash attention on any cache with the patched build (f16 among them)
    exact_kvs = ("f16", "q8_0") if "FA_SHAPE_INVARIANT = 1" in info["llama_cpp_build"] else (
        "q8_0", "bf16")
    assert exact["dtype"] in [f"the GGUF file's own, KV cache {kv}" for kv in exact_kvs]
    assert exact["greedy_deterministic"] is True
    assert ffwd_main(["info", "--json", "--backend", "transformers", "--dtype", "float32"]) == 0
    hf = json.loads(capsys.readouterr().out)
    assert (hf["backend"], hf["dtype"]) == ("transformers", "float32")
    assert ffwd_main(["info", "--model", "/no/such/model"]) == 2
    err = capsys.readouterr().err  # one message naming where ffwd looked, no traceback
    assert "was not found. ffwd looked in" in err and "Traceback" not in err


def test_serve_help_states_every_limit_and_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        ffwd_main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in (("--default-max-tokens", 1024), ("--max-tokens-limit", 4096),
                          ("--max-queue", 16), ("--max-body-bytes", 4 << 20)):
        assert flag in text and f"default: {default})" in text, flag
    assert ffwd_main(["serve", "--default-max-tokens", "9000", "--port", "1"]) == 2
    assert "--default-max-tokens 9000" in capsys.readouterr().err


def test_serve_refuses_a_trace_file_it_cannot_write(capsys: pytest.CaptureFixture[str]) -> None:
    assert ffwd_main(["serve", "--fill-trace", "/dev/null/sub/trace.jsonl"]) == 2
    assert "cannot append" in capsys.readouterr().err


def test_readme_links_stay_inside_the_repository() -> None:
    import re

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert "docs/architecture.md" in links and "../" not in readme
    for link in links:
        if "://" not in link:
            assert (root / link).exists(), link


def test_info_reports_the_attention_table_once_measured(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ffwd.models
    from ffwd.engine.cost.surface import flat
    from ffwd.engine.llama.attention import AttentionTable, Measured

    seen: list[tuple[object, ...]] = []

    def path(ref: object, backend: str, parts: tuple[object, ...]) -> Path:
        seen.append((backend, *parts[2:]))
        return tmp_path / "costs.json"

    monkeypatch.setattr(ffwd.models, "cost_curve_path", path)
    argv = ["info", "--json", "--device", "cpu", "--threads", "2"]
    assert ffwd_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["attention"].startswith("not measured yet")
    # The key the loader uses: where it runs, threads, context, batch, the settings.
    assert seen == [("llamacpp", "cpu", 2, 8192, 512, "auto", "auto", False)]
    surface = flat({1: 9.0, 4: 12.25}, {1: 9.0, 4: 10.0}, max_append=512)
    table = AttentionTable({"flash/f16": Measured(surface, 278.0),
                            "plain/f16": Measured(surface, 346.0)}, "plain/f16", "fastest")
    (tmp_path / "costs.json").write_text(json.dumps(table.as_dict()))
    assert ffwd_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["attention"][-1] == "   chosen: plain/f16 (fastest)"
    assert "at depth      0           | 9.0     10.0" in out["cost_surface"]
    assert out["dtype"] == "the GGUF file's own, KV cache f16"
    assert out["greedy_deterministic"] is False


def test_measure_cost_replaces_a_stale_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ffwd.engine.cost.measure
    import ffwd.models
    import ffwd.models.costs
    import ffwd.models.load
    from ffwd.engine.cost.surface import flat
    from ffwd.engine.llama.attention import AttentionTable, Measured
    from ffwd.fill.spans import POINTS

    for module in (ffwd.models, ffwd.models.load):
        monkeypatch.setattr(module, "cost_curve_path", lambda *a: tmp_path / "costs.json")
    # However busy this machine is, the new table is kept (busy ones are tested apart).
    monkeypatch.setattr(ffwd.models.costs, "BUSY", 1.01)
    # and its deep phase has the time it needs (a busy machine's budget would cut it
    # short of a second depth, which is what this test reads).
    monkeypatch.setattr(ffwd.engine.cost.measure, "BUDGET_S", 120.0)
    stale = flat({1: 999.0, 2: 999.0}, {1: 999.0, 2: 999.0}, max_append=512)
    table = AttentionTable({"flash/q8_0": Measured(stale, 1.0)}, "flash/q8_0", "stale")
    (tmp_path / "costs.json").write_text(json.dumps(table.as_dict()))
    # One path (flash attention on an f16 cache) and a 2048-id window (one depth past
    # the shallow one) keep the measurement short.
    argv = ["info", "--json", "--device", "cpu", "--threads", "1", "--flash-attn", "on",
            "--kv-cache", "f16", "--context", "2048", "--measure-cost"]
    assert ffwd_main(argv) == 0
    assert "999" not in json.loads(capsys.readouterr().out)["cost_surface"]
    fresh = AttentionTable.from_dict(json.loads((tmp_path / "costs.json").read_text()))
    assert fresh.chosen == "flash/f16" and list(fresh.paths) == ["flash/f16"]
    surface = fresh.paths["flash/f16"].surface
    assert surface is not None and len(surface.depths) >= 2  # priced by depth
    assert sorted(surface.rows[surface.depths[0]]) == list(POINTS)
