"""Caches are disposable: every kind of file ffwd keeps under FFWD_CACHE_DIR, damaged
(truncated, not JSON, another version's layout, wrong types inside), is logged by its
path and built again; it never stops a start."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ffwd.engine.llama.probe
import ffwd.models
import ffwd.models.costs
from ffwd.cli import main as ffwd_main
from ffwd.engine.cost.surface import CostSurface, flat
from ffwd.engine.llama.attention import AttentionTable, Measured
from ffwd.engine.llama.native import LoadReport
from ffwd.models import ModelRef, check_engine, load_or_measure, resolve_model
from ffwd.models.cache import MANIFEST, check_tree, manifest, read_cached

SURFACE = flat({1: 9.5, 4: 12.25}, {1: 9.0, 4: 10.0}, max_append=512)
TABLE = AttentionTable({"flash/f16": Measured(SURFACE, 278.0),
                        "plain/f16": Measured(None, 0.0, "failed")}, "flash/f16", "fastest")


def truncated(text: str) -> str:
    return text[: len(text) // 2]


def garbage(text: str) -> str:
    return "\x00\xff not json at all"


# Each kind of cost file damaged: how, and what the reader must refuse.
COST_DAMAGE: dict[str, Callable[[dict[str, Any]], object]] = {
    "a JSON list": lambda d: [d],
    "the chosen path was not measured": lambda d: {**d, "chosen": "plain/f16"},
    "a chosen path of no known shape": lambda d: {**d, "chosen": "fast"},
    "times as text": lambda d: {**d, "paths": {"flash/f16": {
        **d["paths"]["flash/f16"], "surface": {**SURFACE.as_dict(), "last": {"0": {"1": "x"}}}}}},
    "a negative time": lambda d: {**d, "paths": {"flash/f16": {
        **d["paths"]["flash/f16"], "surface": {**SURFACE.as_dict(), "rows": {"0": {"1": -1}}}}}},
    "max_append 0": lambda d: {**d, "paths": {"flash/f16": {
        **d["paths"]["flash/f16"], "surface": {**SURFACE.as_dict(), "max_append": 0}}}},
    "another version's layout": lambda d: {"version": 1, "ms": [9.0, 10.0]},
}


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_missing_entry_is_silent_a_damaged_one_is_named_and_removed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "x.json"
    assert read_cached(path, lambda p: json.loads(p.read_text()), "thing") is None
    assert warnings(caplog) == []
    path.write_text('{"a": ')
    assert read_cached(path, lambda p: json.loads(p.read_text()), "thing") is None
    [line] = warnings(caplog)
    assert str(path) in line and "JSONDecodeError" in line and "building it again" in line
    assert not path.exists()


@pytest.mark.parametrize("damage", [truncated, garbage, *COST_DAMAGE.values()],
                         ids=["truncated", "garbage", *COST_DAMAGE])
def test_a_damaged_attention_table_is_measured_again_and_said_so(
        damage: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(ffwd.models.costs, "BUSY", 1.01)  # cached however busy the machine
    path = tmp_path / "costs" / "model-llamacpp-key.json"
    runs: list[int] = []

    def measure(backend: object) -> AttentionTable:
        runs.append(1)
        return TABLE

    load_or_measure(None, path, measure=measure)
    good = path.read_text()
    if damage in (truncated, garbage):
        path.write_text(damage(good))
    else:
        path.write_text(json.dumps(damage(json.loads(good))))
    found = load_or_measure(None, path, measure=measure)
    assert runs == [1, 1] and found.chosen == "flash/f16"
    [line] = warnings(caplog)
    assert str(path) in line and "building it again" in line
    assert path.read_text() == good  # the new measurement replaced it
    assert load_or_measure(None, path, measure=measure).chosen == "flash/f16"
    assert runs == [1, 1]  # and is read from then on


def test_a_damaged_cost_surface_is_measured_again(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(ffwd.models.costs, "BUSY", 1.01)
    path = tmp_path / "costs" / "model-transformers-key.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**SURFACE.as_dict(), "rows": {"0": {"1": True}}, "last": {}}))
    found = load_or_measure(None, path, measure=lambda b: SURFACE)
    assert isinstance(found, CostSurface) and found.as_dict() == SURFACE.as_dict()
    assert any(str(path) in line for line in warnings(caplog))


@pytest.mark.parametrize("text", ['{"weights": {"CPU": 100.0}', "[1, 2]",
                                  '{"weights": {"CPU": "lots"}, "kv": {}}',
                                  '{"weights": [1], "kv": {}}', '{"mib": 3}'],
                         ids=["truncated", "a list", "text for MiB", "a list of weights",
                              "another version"])
def test_a_damaged_engine_check_runs_the_check_again(
        text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FFWD_CACHE_DIR", str(tmp_path))
    report = LoadReport({"CPU": 100.0}, {"CPU": 12.0})
    runs: list[str] = []
    monkeypatch.setattr(ffwd.engine.llama.probe, "first_forward",
                        lambda path, **kw: runs.append(path) or report)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    ref = ModelRef("m", tmp_path, "m.gguf")
    args: dict[str, Any] = {"threads": 2, "kv_cache": "auto", "n_gpu_layers": 0}
    assert check_engine(ref, **args) == report
    [mark] = (tmp_path / "checks").iterdir()
    mark.write_text(text)
    assert check_engine(ref, **args) == report
    assert len(runs) == 2
    [line] = warnings(caplog)
    assert str(mark) in line and "engine check" in line
    assert LoadReport.from_dict(json.loads(mark.read_text())) == report


def tree(tmp_path: Path) -> Path:
    """A converted tree as `save_tree` leaves it: two files and their manifest."""
    t = tmp_path / "tok"
    t.mkdir()
    (t / "tokenizer_config.json").write_text('{"model_max_length": 8192, "pad": "<p>"}')
    (t / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (t / MANIFEST).write_text(json.dumps(manifest(t)))
    return t


@pytest.mark.parametrize(("damage", "needle"), [
    (lambda t: (t / "tokenizer_config.json").write_text('{"model_max_len'),
     "tokenizer_config.json: 15 bytes, written with 40"),
    (lambda t: (t / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}'),
     "tokenizer.json: its content changed"),  # the same size, other types or values inside
    (lambda t: (t / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda t: (t / MANIFEST).unlink(), "no ffwd-manifest.json"),
    (lambda t: (t / MANIFEST).write_text(json.dumps({**json.loads(
        (t / MANIFEST).read_text()), "transformers": "4.0.0"})), "transformers 4.0.0"),
    (lambda t: (t / MANIFEST).write_text("[]"), "not a layout-1 manifest"),
], ids=["truncated", "changed", "missing", "no manifest", "another transformers",
        "garbage manifest"])
def test_a_converted_tree_names_the_file_that_differs(
        damage: Callable[[Path], object], needle: str, tmp_path: Path) -> None:
    t = tree(tmp_path)
    assert check_tree(t) == t
    damage(t)
    with pytest.raises(ValueError, match=needle):
        check_tree(t)


def test_a_truncated_tokenizer_config_is_converted_again_and_info_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The soak's case: a truncated tokenizer_config.json stopped `ffwd serve`. Here every
    kind of entry `ffwd info` reads is damaged at once, and it still answers."""
    monkeypatch.setenv("FFWD_CACHE_DIR", str(tmp_path))
    curve = tmp_path / "costs" / "table.json"
    monkeypatch.setattr(ffwd.models, "cost_curve_path", lambda *a: curve)
    argv = ["info", "--json", "--device", "cpu", "--threads", "1"]
    assert ffwd_main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    [tok] = (tmp_path / "tokenizers").iterdir()
    [mark] = (tmp_path / "checks").iterdir()
    config = tok / "tokenizer_config.json"
    config.write_text(truncated(config.read_text()))
    mark.write_text("garbage")
    curve.parent.mkdir()
    curve.write_text('{"chosen": ')
    caplog.set_level(logging.WARNING)
    assert ffwd_main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["vocab_size"] == first["vocab_size"]
    assert again["attention"] == first["attention"]  # not measured, as before
    assert first["attention"].startswith("not measured yet")
    lines = warnings(caplog)
    assert any(str(tok) in ln and "tokenizer_config.json" in ln for ln in lines), lines
    assert any(str(mark) in ln for ln in lines), lines
    assert any(str(curve) in ln for ln in lines), lines
    assert check_tree(tok) == tok  # converted again, whole
    assert LoadReport.from_dict(json.loads(mark.read_text()))


def test_a_truncated_gemma3_gguf_is_assembled_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FFWD_CACHE_DIR", str(tmp_path))
    ref = resolve_model("gemma3")
    size = ref.path.stat().st_size
    with ref.path.open("r+b") as fh:
        fh.truncate(size // 3)  # as a crash in the middle of assembling left it
    assert resolve_model("gemma3").path.stat().st_size == size
    [line] = warnings(caplog)
    assert str(ref.path) in line and "parts hold" in line
    assert [p.name for p in ref.path.parent.iterdir()] == [ref.path.name]  # no leftovers


def _tree(root: Path) -> Path:
    """A stand-in for the package's source tree (its vendored llama.cpp, empty)."""
    (root / "vendor" / "llama.cpp").mkdir(parents=True, exist_ok=True)
    return root


def test_a_damaged_llama_cpp_wheel_is_built_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import zipfile

    from tests.unit.test_native import _llama_build

    lb = _llama_build()
    name = "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"

    def pip_wheel(cmd: list[str], **kw: object) -> None:  # a build: a whole wheel in -w
        if "-w" not in cmd:  # git applying the patches
            return
        with zipfile.ZipFile(Path(cmd[cmd.index("-w") + 1]) / name, "w") as z:
            z.writestr("llama_cpp/__init__.py", "x = 1\n" * 1000)

    builds: list[list[str]] = []
    monkeypatch.setattr(lb, "run", lambda cmd, **kw: ("-w" in cmd and builds.append(cmd))
                        or pip_wheel(cmd))
    monkeypatch.setattr(lb, "sdist", lambda spec, into: _tree(tmp_path / "src"))
    out = tmp_path / "key"
    wheel = lb.build_wheel("llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON", out)
    assert lb.build_wheel("llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON", out) == wheel
    assert len(builds) == 1  # cached
    wheel.write_bytes(wheel.read_bytes()[:300])  # a copy cut short
    assert lb.build_wheel("llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON", out) == wheel
    assert len(builds) == 2 and lb.intact_wheel(wheel)
    assert f"the cached wheel {wheel} is damaged" in capsys.readouterr().err


def test_a_peer_binary_that_does_not_run_is_built_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.test_native import _llama_build

    lb = _llama_build()
    monkeypatch.setattr(lb, "cache_root", lambda: tmp_path / "llama")
    monkeypatch.setattr(lb, "sdist", lambda spec, into: _tree(tmp_path / "src"))
    cmakes: list[list[str]] = []

    def cmake(cmd: list[str], **kw: object) -> None:  # a build: the targets named, runnable
        if cmd[0] != "cmake":  # git applying the patches
            return
        cmakes.append(cmd)
        if "--build" in cmd:
            out = Path(cmd[cmd.index("--build") + 1]) / "bin"
            out.mkdir(parents=True, exist_ok=True)
            for target in cmd[cmd.index("--target") + 1:]:
                (out / target).write_text("#!/bin/sh\necho version 1\n")
                (out / target).chmod(0o755)

    monkeypatch.setattr(lb, "run", cmake)
    key = lb.build_key("s", "")
    # configure, the upstream peers, the patched peers and checks
    assert lb.build_peers("s", "", tmp_path / "bin") == 0 and len(cmakes) == 3
    assert lb.build_peers("s", "", tmp_path / "bin") == 0 and len(cmakes) == 3  # cached
    cached = tmp_path / "llama" / key / "bin" / "llama-server"
    cached.write_bytes(b"\x7fELF\x02")  # cut short
    assert lb.build_peers("s", "", tmp_path / "bin") == 0 and len(cmakes) == 6
    assert f"{cached} does not run" in capsys.readouterr().err
    assert lb.runs(cached)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_damaged_converted_model_is_converted_again(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import torch

    from ffwd.models import load_model
    from tests.engine.tiny_gguf import write_tiny_gguf

    monkeypatch.setenv("FFWD_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_tiny_gguf("llama", tmp_path / "tiny.gguf", eos=1)
    ref = ModelRef("tiny", gguf.parent, gguf.name)
    ids = torch.tensor([[1, 2, 3]])
    first = load_model(ref, dtype="float32", device="cpu")(ids).logits.detach().clone()
    [tree] = (tmp_path / "cache" / "models").iterdir()
    damaged = tree / name  # cut short in a new file: the first model still maps the old one
    cut = tree / "cut"
    cut.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    os.replace(cut, damaged)
    again = load_model(ref, dtype="float32", device="cpu")
    [line] = warnings(caplog)
    assert str(damaged) in line and "converted model" in line
    assert check_tree(tree) == tree
    assert torch.equal(first, again(ids).logits)


def test_an_unwritable_cache_folder_still_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from ffwd.models import load_model
    from tests.engine.tiny_gguf import write_tiny_gguf

    (tmp_path / "cache").write_text("a file where the folder should be")
    monkeypatch.setenv("FFWD_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_tiny_gguf("llama", tmp_path / "tiny.gguf", eos=1)
    model = load_model(ModelRef("tiny", gguf.parent, gguf.name), dtype="float32", device="cpu")
    assert model is not None
    [line] = warnings(caplog)
    assert "cannot be cached" in line and "built again at the next start" in line
