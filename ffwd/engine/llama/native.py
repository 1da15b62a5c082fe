"""What the installed llama.cpp library is, and what it does on this machine.

Decisions are pure functions of strings (a build line, llama.cpp's load log), so
they are tested without the hardware they are about:

* `amx_kernels(line)`: ggml's AMX kernels are compiled in. Where GCC built them
  they crash on the first forward of several ids (llama.cpp #20824), so a
  library built elsewhere with them gets its weights kept out of the CPU's
  extra buffer types (`extra_buffers`): no AMX, and no REPACK either, which
  llama.cpp switches together. ``make install`` builds without them.
* `shape_invariant(line)`: the CPU backend has the flash-attention kernel of
  ``patches/llama.cpp`` (``FA_SHAPE_INVARIANT = 1``), whose rows do not depend
  on how many ids a forward carries, its threads or its micro-batches: on the
  CPU every flash-attention path is then exact.
* `gpu_layers(requested, offload, line)`: the layers to offload, ``auto``
  meaning all of them where the build can offload and none elsewhere; asking a
  CPU-only build for GPU layers is an error that names the rebuild.
* `LoadReport.parse(lines)`: where llama.cpp put the weights (CPU, CPU_REPACK,
  AMX, CUDA0, Metal ...) and the KV cache, read from its own load log.

>>> amx_kernels("CPU : AVX2 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | REPACK = 1 |")
True
>>> shape_invariant("CPU : AVX2 = 1 | FA_SHAPE_INVARIANT = 1 | REPACK = 1 |")
True
>>> gpu_layers("auto", offload=False, line="CPU : AVX2 = 1 |")
0
>>> LoadReport.parse(["load_tensors:   CPU_REPACK model buffer size =    88.00 MiB"]).weights
{'CPU_REPACK': 88.0}
"""

from __future__ import annotations

import ctypes
import logging
import platform
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REBUILD = ("rebuild llama.cpp with GPU offload: `make install LLAMA=cuda` (NVIDIA), "
           "`make install LLAMA=metal` (Apple) or `make install LLAMA=vulkan`")


def amx_kernels(line: str) -> bool:
    """Whether a build line says ggml's AMX kernels are compiled in."""
    return re.search(r"\bAMX_INT8 = 1\b", line) is not None


def shape_invariant(line: str) -> bool:
    """Whether a build line says its CPU flash attention is shape-invariant (the patch)."""
    return re.search(r"\bFA_SHAPE_INVARIANT = 1\b", line) is not None


def extra_buffers(line: str) -> bool:
    """Whether weights may go to the CPU's extra buffer types (REPACK, AMX): not where
    the build has the AMX kernels that crash."""
    return not amx_kernels(line)


def gpu_layers(requested: str | int, *, offload: bool, line: str) -> int:
    """llama.cpp's ``n_gpu_layers`` for a setting: -1 (all), 0 or a count.

    >>> gpu_layers("auto", offload=True, line="")
    -1
    >>> gpu_layers(8, offload=False, line="CPU : AVX2 = 1 |")
    Traceback (most recent call last):
    ...
    ValueError: FFWD_N_GPU_LAYERS=8: this llama.cpp was built for the CPU only ...
    """
    if requested == "auto":
        return -1 if offload else 0
    layers = -1 if requested == "all" else int(requested)
    if layers != 0 and not offload:
        raise ValueError(f"FFWD_N_GPU_LAYERS={requested}: this llama.cpp was built for the CPU "
                         f"only (its build line: {line.strip()}); {REBUILD}")
    return layers


_BUFFER = re.compile(r"(\S+) (model|KV) buffer size\s*=\s*([\d.]+) MiB")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


@dataclass(frozen=True, slots=True)
class LoadReport:
    """Where a loaded model lives: MiB of weights and of KV cache per buffer type."""

    weights: dict[str, float] = field(default_factory=dict)
    kv: dict[str, float] = field(default_factory=dict)
    offloaded: tuple[int, int] | None = None  # (layers on the GPU, layers in all)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> LoadReport:
        weights: dict[str, float] = {}
        kv: dict[str, float] = {}
        offloaded = None
        for line in lines:
            if m := _BUFFER.search(line):
                into = weights if m[2] == "model" else kv
                into[m[1]] = into.get(m[1], 0.0) + float(m[3])
            elif m := _OFFLOADED.search(line):
                offloaded = (int(m[1]), int(m[2]))
        return cls(weights, kv, offloaded)

    def as_dict(self) -> dict[str, Any]:
        return {"weights": self.weights, "kv": self.kv, "offloaded": self.offloaded}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadReport:
        def mib(raw: object) -> dict[str, float]:  # a TypeError or ValueError when damaged
            return {str(k): float(v) for k, v in dict(raw).items()}  # type: ignore[call-overload]

        off = d.get("offloaded")
        return cls(mib(d["weights"]), mib(d["kv"]),
                   (int(off[0]), int(off[1])) if off else None)

    @property
    def device(self) -> str:
        """``cpu``, or the GPU buffer holding most weights (``CUDA0``, ``Metal`` ...)."""
        gpu = {k: v for k, v in self.weights.items() if not _on_cpu(k)}
        return max(gpu, key=gpu.__getitem__) if gpu else "cpu"

    def describe(self) -> str:
        """One line: the weights' buffers with their sizes, and the cache's buffers."""
        weights = ", ".join(f"{k} {v:.0f} MiB" for k, v in self.weights.items()) or "-"
        where = f"; {self.offloaded[0]}/{self.offloaded[1]} layers on the GPU" \
            if self.offloaded and self.offloaded[0] else ""
        return f"weights in {weights}; KV cache in {', '.join(self.kv) or '-'}{where}"


@dataclass(frozen=True, slots=True)
class Device:
    """One of ggml's compute devices: its kind (CPU, GPU, IGPU, ACCEL), name, description."""

    kind: str
    name: str
    description: str


def gpu_key(layers: int, found: Iterable[Device]) -> str:
    """The device part of a cost curve's cache key: ``cpu``, or the GPU and the layers on it.

    >>> gpu_key(-1, [Device("CPU", "CPU", "EPYC"), Device("GPU", "CUDA0", "NVIDIA H200")])
    'NVIDIA-H200-ngl-1'
    """
    gpus = [d for d in found if d.kind in ("GPU", "IGPU")]
    if layers == 0 or not gpus:
        return "cpu"
    return re.sub(r"[^A-Za-z0-9._]+", "-", gpus[0].description or gpus[0].name) + f"-ngl{layers}"


_KINDS = ("CPU", "GPU", "IGPU", "ACCEL", "META")


def devices(lib: Any) -> list[Device]:
    """ggml's registered devices, read from the library `lib` (llama_cpp) loaded."""
    base = Path(lib.__file__).parent / "lib"
    names = ("libggml.so", "libggml.dylib", "ggml.dll")
    path = next((base / n for n in names if (base / n).exists()), None)
    if path is None:
        return []
    ggml = ctypes.CDLL(str(path))  # already loaded by llama.cpp: the same handle
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(ggml, fn).restype = ctypes.c_char_p
        getattr(ggml, fn).argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_type.restype = ctypes.c_int
    ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    out = []
    for i in range(int(ggml.ggml_backend_dev_count())):
        dev = ggml.ggml_backend_dev_get(i)
        kind = int(ggml.ggml_backend_dev_type(dev))
        out.append(Device(_KINDS[kind] if kind < len(_KINDS) else str(kind),
                          (ggml.ggml_backend_dev_name(dev) or b"").decode(),
                          (ggml.ggml_backend_dev_description(dev) or b"").decode().strip()))
    return out


def _on_cpu(buffer: str) -> bool:
    return buffer.upper().startswith(("CPU", "AMX")) or buffer.upper().endswith("_HOST")


def cpu_model() -> str:
    """The CPU's model name (what a native build is compiled for)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def available_mib() -> float:
    """The memory the system can give a new process now (MemAvailable), in MiB; without
    /proc/meminfo, the physical memory."""
    import os

    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20


# --- llama.cpp's log ------------------------------------------------------------

_log_lock = threading.Lock()
_captured: list[str] | None = None
_echo = False
_callback: Any = None  # the ctypes callback; kept alive as long as llama.cpp may call it
_partial = ""


def route_log(lib: Any, echo: bool) -> None:
    """Send llama.cpp's log here (once): kept while `capture` listens, echoed to stderr
    when `echo` (FFWD_LLAMACPP_LOG=1), dropped otherwise."""
    global _callback, _echo
    import sys

    _echo = _echo or echo

    def on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        global _partial
        if not text:
            return
        s = text.decode("utf-8", errors="replace")
        if _echo:
            sys.stderr.write(s)
        if _captured is not None:  # llama.cpp may send a line in pieces
            _partial += s
            *done, _partial = _partial.split("\n")
            _captured.extend(done)

    if _callback is None:
        _callback = lib.llama_log_callback(on_log)
        lib.llama_log_set(_callback, ctypes.c_void_p(0))


@contextmanager
def capture() -> Iterator[list[str]]:
    """The log lines llama.cpp writes inside the block (one load at a time)."""
    global _captured
    with _log_lock:
        _captured = []
        try:
            yield _captured
        finally:
            _captured = None


# --- the library, once per process ------------------------------------------------

_init_lock = threading.Lock()
_initialised = False
_warned_amx = False
logger = logging.getLogger("ffwd.engine")


def _lib() -> Any:
    import llama_cpp

    return llama_cpp


def init_llama(log: bool = False) -> Any:
    """Load the library once, route its log (dropped unless `log`), return the module."""
    global _initialised
    lib = _lib()
    with _init_lock:
        route_log(lib, log)
        if not _initialised:
            lib.llama_backend_init()
            _initialised = True
    return lib


def system_info() -> str:
    """llama.cpp's build line: the instruction sets it was compiled for (AVX2 = 1 ...)."""
    return str(init_llama().llama_print_system_info().decode("utf-8", errors="replace")).strip()


def gpu_offload() -> bool:
    """Whether this llama.cpp build can offload layers to a GPU (CUDA, Metal, Vulkan ...)."""
    return bool(init_llama().llama_supports_gpu_offload())


def device_key(n_gpu_layers: int) -> str:
    """Where forwards run with `n_gpu_layers` offloaded: the cost curve's device key."""
    return gpu_key(n_gpu_layers, devices(init_llama()))


def load_model(lib: Any, path: str, n_gpu_layers: int, line: str) -> Any:
    """The GGUF model at `path`, `n_gpu_layers` offloaded; out of the extra buffer types
    (REPACK, AMX) where the build has the AMX kernels (`extra_buffers`), said once."""
    global _warned_amx
    params = lib.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    params.use_extra_bufts = extra_buffers(line)
    if not params.use_extra_bufts and not _warned_amx:
        _warned_amx = True
        logger.warning("llama.cpp was built with ggml's AMX kernels, which crash (llama.cpp "
                    "#20824): the weights stay in plain CPU buffers (no AMX, no REPACK); "
                    "`make install` builds the library without them")
    model = lib.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise ValueError(f"{path}: llama.cpp cannot load this file as a GGUF model")
    return model
