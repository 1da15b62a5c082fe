"""Where a bench run ran: the machine, the versions, and what each kind of system was built as.

`environment` is the results' ``environment`` entry. Its ``builds`` give one
line per kind of system that ran, with llama.cpp's build line (the instruction
sets it was compiled for) or torch's CPU capability, so that a reader sees
whether the peers ran kernels as fast as the engine's; ``llama_server`` says
whether llama-server was the native build or the xllamacpp fallback
(`ffwd.bench.systems.llama_server.build`).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ffwd.bench.systems.names import LLAMA_SERVER, SERVED, SystemName, parse_system
from ffwd.engine.llama.native import cpu_model
from ffwd.engine.promise import loaded_promise


def environment(
    ref: Any, backend: Any, engine: str, threads: int, names: Sequence[str]
) -> dict[str, Any]:
    """The machine and versions, the model, and the builds of the systems `names`."""
    import torch
    import transformers

    from ffwd.engine.llama.native import system_info

    return {
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "threads": threads,
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "llama_cpp": version("llama-cpp-python"),
        "llama_cpp_system_info": system_info(), "backend": engine,
        "model": ref.name, "model_path": str(ref.path),
        # llama.cpp: gguf-kv-<the KV cache's type>[-noflash]
        "dtype": backend.dtype_name, "device": str(backend.device),
        # llama.cpp: every attention path as timed at load, and the one chosen
        "attention": (backend.attention_table.describe(backend.context_window)
                      if backend.attention_table is not None else None),
        # what greedy output the ffwd systems promise on that path (the identity checks test it)
        "greedy_determinism": loaded_promise(backend)[1],
        **builds([parse_system(n) for n in names], engine),
    }


def builds(names: Sequence[SystemName], engine: str) -> dict[str, Any]:
    """What each kind of system that ran was built as: ``builds`` (one line per kind,
    for the report) and ``llama_server`` (`llama_server.build`, where it ran)."""
    import torch

    from ffwd.bench.systems.llama_server import FALLBACK
    from ffwd.bench.systems.llama_server import build as server_build
    from ffwd.engine.llama.native import system_info

    engines = {n.engine or engine for n in names if n.base in SERVED}
    out: list[dict[str, str]] = []
    if "llamacpp" in engines:
        out.append({"systems": "ffwd (llama.cpp)", "system_info": system_info(),
                    "build": f"llama-cpp-python {version('llama-cpp-python')}"})
    if "transformers" in engines or any(n.base.startswith("hf-") for n in names):
        out.append({"systems": "transformers (ffwd, hf-*)", "build": f"torch {torch.__version__}",
                    "system_info": "CPU capability " + torch.backends.cpu.get_cpu_capability()})
    server = server_build() if any(n.base == LLAMA_SERVER for n in names) else None
    if server is not None:
        what = (f"xllamacpp {server['version']}: FALLBACK, a prebuilt portable wheel, not "
                "built like the engine (not a fair peer; `make peers` builds the native one)"
                if server["kind"] == FALLBACK
                else f"native, built like the engine by `make peers` ({server['version']}): "
                     f"{_short(server['binary'])}")
        out.append({"systems": LLAMA_SERVER, "build": what,
                    "system_info": server["system_info"]})
    up = server_build(upstream=True) if any(n.upstream for n in names) else None
    if up is not None and up["kind"] != FALLBACK:  # not built: those systems did not run
        out.append({"systems": f"{LLAMA_SERVER}:upstream", "system_info": up["system_info"],
                    "build": f"native, the same source and flags without patches/llama.cpp "
                             f"({up['version']}): {_short(up['binary'])}"})
    return {"builds": out, "llama_server": server}


def _short(path: str) -> str:
    """`path` from the working directory where it lies under it (no home paths in READMEs)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
