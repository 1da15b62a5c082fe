"""`ffwd bench`'s peers and modes: the native llama-server (its command line, its build
line), the xllamacpp fallback and how reports label it, ``:deterministic`` ffwd systems,
and the identity checks per setup (no model; stand-in binaries and processes)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ffwd.bench import report
from ffwd.bench.environment import builds
from ffwd.bench.fidelity import correctness, variants
from ffwd.bench.systems import llama_server, servers
from ffwd.bench.systems.names import SystemName, parse_system
from ffwd.bench.workloads import Item

FAKE_SERVER = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "version: 9 (build 1, commit abc)"; exit 0; fi
echo "0.00.000.100 T cmn  print_info: system_info: n_threads = 4 / 8 | CPU : AVX2 = 1 | \
AVX512 = 1 | " >&2
echo "failed to load model" >&2
exit 1
"""


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory holding this "interpreter" (sys.executable points into it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    return bin_dir


def test_the_native_server_is_found_beside_the_interpreter(venv: Path) -> None:
    assert llama_server.native_binary() is None
    (venv / "llama-server").write_text(FAKE_SERVER)
    assert llama_server.native_binary() == venv / "llama-server"


def test_the_native_command_carries_the_bench_settings(venv: Path) -> None:
    (venv / "llama-server").write_text(FAKE_SERVER)
    cmd = llama_server.command("m.gguf", 8123, 2, 8192, 512, "ngram-mod")
    assert cmd[0] == str(venv / "llama-server")
    for flag, value in (("--model", "m.gguf"), ("--port", "8123"), ("--threads", "2"),
                        ("--threads-batch", "2"), ("--ctx-size", "8192"),
                        ("--batch-size", "512"), ("--ubatch-size", "512"), ("--parallel", "1"),
                        ("--cache-ram", "0"), ("--host", "127.0.0.1")):
        assert cmd[cmd.index(flag) + 1] == value, flag
    assert {"--swa-full", "--no-warmup", "--no-webui"} <= set(cmd)
    assert cmd[-2:] == ["--spec-type", "ngram-mod"]
    assert "--spec-type" not in llama_server.command("m.gguf", 1, 1, 512, 512)
    with pytest.raises(ValueError, match="speculation mode"):
        llama_server.command("m.gguf", 1, 1, 512, 512, "draft-eagle3")
    off = llama_server.command("m.gguf", 1, 1, 512, 512, "ngram-mod", "off")
    assert off[-2:] == ["--flash-attn", "off"] and "ngram-mod" in off
    assert "--flash-attn" not in llama_server.command("m.gguf", 1, 1, 512, 512)


def test_without_it_the_fallback_runs_the_same_settings(venv: Path) -> None:
    cmd = llama_server.command("m.gguf", 8123, 2, 4096, 256, "ngram-simple")
    assert cmd[:3] == [sys.executable, "-m", "ffwd.bench.systems.llama_server"]
    assert cmd[cmd.index("--ctx") + 1] == "4096" and cmd[-2:] == ["--spec", "ngram-simple"]


@pytest.mark.skipif(llama_server.native_binary() is None,
                    reason="no native llama-server beside this Python: `make peers` builds it")
def test_the_native_server_knows_every_flag_the_bench_passes() -> None:
    binary = llama_server.native_binary()
    assert binary is not None
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    flags = [a for a in llama_server.command("m.gguf", 1, 1, 512, 512, "ngram-mod", "off")
             if a.startswith("--")]
    assert flags and all(f"{flag} " in help_text or f"{flag}," in help_text
                         or f"{flag}\n" in help_text for flag in flags)
    assert "ngram-mod" in help_text


def test_the_native_build_line_and_version_come_from_the_binary(venv: Path) -> None:
    server = venv / "llama-server"
    server.write_text(FAKE_SERVER)
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    built = llama_server.build()
    assert built == {"kind": "native", "binary": str(server),
                     "version": "9 (build 1, commit abc)",
                     "system_info": "CPU : AVX2 = 1 | AVX512 = 1 |"}
    line = builds([parse_system("llama-server")], "llamacpp")["builds"][0]
    assert line["systems"] == "llama-server" and "native" in line["build"]
    assert "make peers" in line["build"] and "AVX512" in line["system_info"]


def test_the_fallback_is_labelled_as_such_everywhere(venv: Path) -> None:
    built = llama_server.build()
    assert built["kind"] == "xllamacpp" and "AVX2" in built["system_info"]
    env = builds([parse_system("ffwd-off"), parse_system("llama-server:ngram-mod")], "llamacpp")
    lines = report.build_lines(env)
    assert lines[0].startswith("- ffwd (llama.cpp): llama-cpp-python ")
    assert "FALLBACK" in lines[1] and "not a fair peer" in lines[1]
    assert "fallback" in "".join(report.fallback_note(env))
    assert report.fallback_note({"llama_server": {"kind": "native"}}) == []


def test_a_deterministic_system_gets_a_server_of_its_own(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    name = parse_system("ffwd-echo:deterministic")
    assert name == SystemName("ffwd-echo", deterministic=True)
    assert name.name == "ffwd-echo:deterministic" and name.engine is None
    with pytest.raises(ValueError, match="deterministic"):
        parse_system("ffwd-off:nondeterministic")
    started: list[list[str]] = []

    def child(label: str, cmd: list[str], port: int, **kw: Any) -> list[str]:
        started.append(cmd)
        return cmd

    monkeypatch.setattr(servers, "ChildServer", child)
    servers.ffwd_server("default", "llamacpp", 2, "float32", None, deterministic=True)
    servers.ffwd_server("default", "llamacpp", 2, "float32")
    assert "--deterministic" in started[0] and "--deterministic" not in started[1]


def test_fill_identity_is_checked_within_each_setup() -> None:
    same, other = {"content": "a", "calls": []}, {"content": "b", "calls": []}
    outputs = {"echo x": {"ffwd-off": same, "ffwd-echo": other,
                          "ffwd-off:deterministic": same, "ffwd-echo:deterministic": same,
                          "llama-server": same}}
    assert variants(outputs) == ["", ":deterministic"]
    items = [Item("echo", "x", [], 4)]
    c = correctness(items, outputs, {}, None, {})
    assert c["echo_vs_off"] == {"echo": (0, 1)}
    assert c["echo_vs_off:deterministic"] == {"echo": (1, 1)}
    assert c["echo_vs_strict:deterministic"] == {}  # nothing forced, no strict system
    lines = report.correctness_lines(c)
    assert "| ffwd-echo:deterministic == ffwd-off:deterministic | echo | 100% | 1 |" in lines
    assert "| ffwd-echo == ffwd-off | echo | 0% | 1 |" in lines
    assert "| ffwd-off == llama-server | echo | 100% | 1 |" in lines


def test_a_call_naming_its_function_is_forced_like_required() -> None:
    a, b = {"content": "", "calls": ["f(1)"]}, {"content": "", "calls": ["f(2)"]}
    outputs = {"repeat n": {"ffwd-off": a, "ffwd-echo": b, "ffwd-strict": b}}
    named = Item("repeat", "n", [], 4, tool_choice={"type": "function",
                                                    "function": {"name": "f"}})
    c = correctness([named], outputs, {}, None, {})
    assert c["echo_vs_off"] == {} and c["echo_vs_strict"] == {"repeat": (1, 1)}


def test_llama_server_runs_at_its_own_openmp_default(
    monkeypatch: pytest.MonkeyPatch, venv: Path
) -> None:
    """ffwd shortens OpenMP's spin for itself; a peer must not inherit that (it slows
    llama-server's decode), but the operator's own setting reaches both."""
    envs: list[dict[str, str]] = []

    def child(label: str, cmd: list[str], port: int, **kw: Any) -> None:
        envs.append(kw["env"])

    monkeypatch.setattr(servers, "ChildServer", child)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("FFWD_PEER", raising=False)
    from ffwd.config.engine import OPENMP_MARK, openmp_defaults

    monkeypatch.delenv(OPENMP_MARK, raising=False)
    openmp_defaults()  # as `import ffwd` did in this process
    servers.llama_server("m.gguf", 2, 8192, 512)
    assert "GOMP_SPINCOUNT" not in envs[-1] and envs[-1]["FFWD_PEER"] == "1"
    monkeypatch.setenv("GOMP_SPINCOUNT", "20000")  # the operator's
    monkeypatch.delenv(OPENMP_MARK)
    servers.llama_server("m.gguf", 2, 8192, 512)
    assert envs[-1]["GOMP_SPINCOUNT"] == "20000"
