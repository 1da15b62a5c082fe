"""What ffwd decides from llama.cpp's build line and load log, without the hardware: the
AMX guard, GPU layers, where the weights went; the build flags and the wheel's key; and
that a native crash in the engine check is one line, not a signal."""

from __future__ import annotations

import importlib.util
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ffwd.engine.llama.native import (
    Device,
    LoadReport,
    amx_kernels,
    extra_buffers,
    gpu_key,
    gpu_layers,
    shape_invariant,
)
from ffwd.engine.llama.probe import exit_message

ROOT = Path(__file__).resolve().parents[2]
# Build lines as llama.cpp prints them (the AMX one from a Sapphire Rapids host).
SAPPHIRE = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
            "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
            "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |")
EPYC = SAPPHIRE.replace("AMX_INT8 = 1 | ", "")
CUDA = "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | " + EPYC


def test_the_shape_invariant_kernel_is_read_off_the_build_line() -> None:
    assert shape_invariant(EPYC.replace("REPACK = 1 |", "REPACK = 1 | FA_SHAPE_INVARIANT = 1 |"))
    assert not shape_invariant(EPYC) and not shape_invariant(CUDA)


def test_amx_kernels_are_read_off_the_build_line() -> None:
    assert amx_kernels(SAPPHIRE) and not extra_buffers(SAPPHIRE)
    assert not amx_kernels(EPYC) and extra_buffers(EPYC)
    assert not amx_kernels(EPYC.replace("REPACK = 1", "AMX_INT8 = 0"))
    assert not amx_kernels(CUDA)


def test_gpu_layers_default_to_all_where_the_build_offloads() -> None:
    assert gpu_layers("auto", offload=True, line=CUDA) == -1
    assert gpu_layers("auto", offload=False, line=EPYC) == 0
    assert gpu_layers("all", offload=True, line=CUDA) == -1
    assert gpu_layers(12, offload=True, line=CUDA) == 12
    assert gpu_layers(0, offload=False, line=EPYC) == 0


@pytest.mark.parametrize("asked", ["all", 1, 40])
def test_gpu_layers_from_a_cpu_build_name_the_rebuild(asked: str | int) -> None:
    with pytest.raises(ValueError, match="FFWD_N_GPU_LAYERS") as err:
        gpu_layers(asked, offload=False, line=EPYC)
    assert "make install LLAMA=cuda" in str(err.value)
    assert "AVX512 = 1" in str(err.value)  # the build line it was refused on


LOAD_LOG = """\
load_tensors: loading model tensors, this can take a while... (mmap = true)
load_tensors: offloaded 25/31 layers to GPU
load_tensors:   CPU_Mapped model buffer size =   112.50 MiB
load_tensors:   CPU_REPACK model buffer size =    30.25 MiB
load_tensors:        CUDA0 model buffer size =   801.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =    96.00 MiB
llama_kv_cache:        CPU KV buffer size =    24.00 MiB
""".splitlines()


def test_the_load_log_says_where_the_weights_and_cache_went() -> None:
    report = LoadReport.parse(LOAD_LOG)
    assert report.weights == {"CPU_Mapped": 112.5, "CPU_REPACK": 30.25, "CUDA0": 801.0}
    assert report.kv == {"CUDA0": 96.0, "CPU": 24.0}
    assert report.offloaded == (25, 31)
    assert report.device == "CUDA0"
    assert "CPU_REPACK 30 MiB" in report.describe() and "25/31 layers" in report.describe()
    assert LoadReport.from_dict(report.as_dict()) == report


def test_a_cpu_load_is_on_the_cpu() -> None:
    report = LoadReport.parse(["load_tensors:   CPU_Mapped model buffer size =    88.00 MiB",
                               "llama_kv_cache:        CPU KV buffer size =    12.00 MiB"])
    assert report.device == "cpu" and report.offloaded is None
    assert "GPU" not in report.describe()


def test_the_cost_curve_key_names_the_gpu_and_its_layers() -> None:
    cpu = Device("CPU", "CPU", "AMD EPYC")
    gpu = Device("GPU", "CUDA0", "NVIDIA H200")
    assert gpu_key(0, [cpu, gpu]) == "cpu"
    assert gpu_key(-1, [cpu]) == "cpu"
    assert gpu_key(-1, [cpu, gpu]) != gpu_key(20, [cpu, gpu])
    assert gpu_key(-1, [cpu, Device("GPU", "Metal", "Apple M3")]).startswith("Apple-M3")


def test_a_native_crash_is_one_line() -> None:
    # A child that dies of SIGSEGV, as the AMX kernels make the engine check's child die.
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c",
                           "import ctypes; ctypes.string_at(0)"], capture_output=True, text=True)
    assert proc.returncode < 0
    line = exit_message(proc.returncode, proc.stderr)
    assert "SIGSEGV" in line and "\n" not in line
    failed = exit_message(1, "Traceback ...\nValueError: x.gguf: cannot load\n")
    assert failed.endswith("ValueError: x.gguf: cannot load")


# --- the build: flags and the wheel's key --------------------------------------------


def make_output(*assign: str) -> str:
    return subprocess.run(["make", "-s", "--no-print-directory", "llama-flags", *assign],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def make_flags(*assign: str) -> list[str]:
    return shlex.split(make_output(*assign))


def test_the_build_leaves_out_amx_and_keeps_native() -> None:
    flags = make_flags()
    assert "-DGGML_NATIVE=ON" in flags
    if platform.machine() in ("x86_64", "AMD64"):
        for var in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
            value = next(f.split("=", 1)[1] for f in flags if f.startswith(f"-D{var}="))
            assert value.split() == ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]


def test_make_takes_a_gpu_switch() -> None:
    assert "-DGGML_CUDA=ON" in make_flags("LLAMA=cuda")
    assert "-DGGML_METAL=ON" in make_flags("LLAMA=metal")
    assert "-DGGML_VULKAN=ON" in make_flags("LLAMA=vulkan")
    assert "-DGGML_METAL=OFF" in make_flags("LLAMA=cpu")
    bad = subprocess.run(["make", "-s", "llama-flags", "LLAMA=rocm"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "expected auto, cpu, cuda, metal or vulkan" in bad.stderr


def _llama_build():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("llama_build", ROOT / "tools/llama_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_wheel_built_with_other_flags_is_another_wheel() -> None:
    lb = _llama_build()
    spec = "llama-cpp-python==0.3.36"
    now = make_output()
    before = " ".join(f for f in shlex.split(now) if "mno-amx" not in f)
    assert lb.build_key(spec, now) != lb.build_key(spec, before)
    assert lb.build_key(spec, now) == lb.build_key(spec, now + "  ")  # spacing is not a flag
    assert lb.build_key(spec, now) != lb.build_key("llama-cpp-python==0.3.37", now)
    assert lb.amx_kernels(SAPPHIRE) and not lb.amx_kernels(EPYC)


def test_install_replaces_a_wheel_from_other_flags(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`install_wheel` reinstalls whenever the environment's build came from another key, and
    refuses a library that still has the AMX kernels."""
    lb = _llama_build()
    wheel = tmp_path / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"
    wheel.write_text("")
    ran: list[list[str]] = []
    monkeypatch.setattr(lb, "build_wheel", lambda spec, args, out: wheel)
    monkeypatch.setattr(lb, "run", lambda cmd, **kw: ran.append(cmd))
    monkeypatch.setattr(lb.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(lb, "build_line", lambda: EPYC)
    (tmp_path / ".llama-build").write_text("an-older-key\n")
    assert lb.install_wheel("llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON") == 0
    assert any("--force-reinstall" in cmd for cmd in ran)
    ran.clear()
    assert lb.install_wheel("llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON") == 0
    assert ran == []  # the same key: nothing to reinstall
    monkeypatch.setattr(lb, "build_line", lambda: SAPPHIRE)
    assert lb.install_wheel("llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON") == 1


def test_a_build_with_other_patches_is_another_build(tmp_path: Path) -> None:
    """The patches are part of the key: an unpatched or differently patched build never
    comes back from the cache for a patched one."""
    lb = _llama_build()
    spec, flags = "llama-cpp-python==0.3.36", make_output()
    ours = lb.patches()
    assert [p.name for p in ours][:1] == ["0001-ggml-cpu-flash-attn-shape-invariant-kernel.patch"]
    assert lb.build_key(spec, flags) == lb.build_key(spec, flags, lb.patches_digest(ours))
    assert lb.build_key(spec, flags) != lb.build_key(spec, flags, lb.patches_digest([]))
    edited = tmp_path / ours[0].name
    edited.write_bytes(ours[0].read_bytes() + b"\n")
    assert lb.patches_digest([edited, *ours[1:]]) != lb.patches_digest(ours)


def test_patches_apply_to_a_tree_whatever_repository_holds_it(tmp_path: Path) -> None:
    """`apply_patches` applies through a repository of its own: a tree inside another git
    checkout (or with the sdist's dangling submodule pointer) is patched all the same."""
    lb = _llama_build()
    outer = tmp_path / "outer"
    tree = outer / "vendor" / "llama.cpp"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "a.c").write_text("int a = 1;\n")
    (tree / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    patch = tmp_path / "0001-a.patch"
    patch.write_text("--- a/src/a.c\n+++ b/src/a.c\n@@ -1 +1 @@\n-int a = 1;\n+int a = 2;\n")
    lb.apply_patches(tree, [patch])
    assert (tree / "src" / "a.c").read_text() == "int a = 2;\n"
    with pytest.raises(subprocess.CalledProcessError):  # applied twice: git refuses
        lb.apply_patches(tree, [patch])
