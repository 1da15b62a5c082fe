"""llama.cpp's own server as the bench's peer: the native binary, else the xllamacpp fallback.

The fair peer is the ``llama-server`` that ``make peers`` builds from the
llama.cpp source the engine is built from (``patches/llama.cpp`` applied), with
the same flags, and puts next to this interpreter (``.venv/bin/llama-server``,
`native_binary`); beside it ``llama-server-upstream``, the same source and
flags without the patches: what a user of llama.cpp runs (``upstream``). Where
the patched one is missing, the bench runs llama.cpp's server from the prebuilt
xllamacpp wheel instead (this module's `main`):

    python -m ffwd.bench.systems.llama_server --model FILE.gguf --port N [--threads T]
        [--ctx N] [--batch N] [--spec MODE] [--flash-attn on|off] [--parallel N]

That wheel is a portable build (AVX2 at most), so on a newer CPU its kernels
are slower than the engine's: every report names it as the fallback, never as
a fair peer (`build`).

Both serve llama-server's HTTP API (``/completion``, ``/health``) on loopback
until terminated, the same way: one slot (``--parallel N``: N slots, each of
the given context, its own KV stream as ffwd's sequences have), the given threads (prompt and
decode), context and batch sizes, the full-size sliding-window cache ffwd's
llama.cpp backend uses, no warm-up (the bench warms every system alike) and
no host-memory prompt cache (ffwd's servers run with ``--prompt-cache-bytes
0``; the live slot still serves a growing conversation's prefix).

``--flash-attn`` sets its attention path (llama.cpp's default: flash
attention on where the backend has it). ``--spec`` turns on one of llama.cpp's
draft-free speculation modes (`MODES`, its ``--spec-type``) with llama.cpp's
own defaults for that mode, as a user of ``llama-server --spec-type MODE``
gets them. Some keep state from one request
to the next (``ngram-mod``'s hash pool is shared by all requests,
``ngram-map-k`` drafts more on a prompt it saw before): only a fresh process
starts empty. Each response's ``timings`` then carries ``draft_n`` (ids
drafted) and ``draft_n_accepted`` (ids kept).
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ffwd.bench.systems.names import EXTRA_SPEC_MODES, SPEC_MODES

MODES = (*SPEC_MODES, *EXTRA_SPEC_MODES)  # llama-server's --spec-type names, no draft model
NATIVE = "native"
FALLBACK = "xllamacpp"
NO_UPSTREAM = "llama-server-upstream is not built: `make peers` builds it"


def native_binary(upstream: bool = False) -> Path | None:
    """``make peers``'s ``llama-server`` (`upstream`: ``llama-server-upstream``) beside this
    interpreter, if it is there."""
    # The venv's bin directory, not where its python symlink points.
    path = Path(sys.executable).parent / ("llama-server-upstream" if upstream else "llama-server")
    return path if path.is_file() else None


def command(
    gguf: str, port: int, threads: int, ctx: int, batch: int, spec: str | None = None,
    flash: str | None = None, parallel: int = 1, upstream: bool = False,
) -> list[str]:
    """The command line of the peer server: the native binary where it is built, else
    this module on xllamacpp (the same settings either way; `upstream` has no fallback)."""
    if spec is not None and spec not in MODES:
        raise ValueError(f"unknown speculation mode {spec!r}; expected one of {MODES}")
    binary = native_binary(upstream)
    if binary is None and upstream:
        raise ValueError(NO_UPSTREAM)
    if binary is None:
        return [sys.executable, "-m", __name__, "--model", gguf, "--port", str(port),
                "--threads", str(threads), "--ctx", str(ctx), "--batch", str(batch),
                *(["--spec", spec] if spec else []),
                *(["--flash-attn", flash] if flash else []),
                *(["--parallel", str(parallel)] if parallel > 1 else [])]
    # llama-server splits --ctx-size among its slots: each gets `ctx`, as each ffwd sequence.
    return [str(binary), "--model", gguf, "--host", "127.0.0.1", "--port", str(port),
            "--threads", str(threads), "--threads-batch", str(threads),
            "--ctx-size", str(ctx * parallel), "--batch-size", str(batch),
            "--ubatch-size", str(batch), "--parallel", str(parallel), "--no-kv-unified",
            "--swa-full", "--no-warmup", "--no-webui", "--cache-ram", "0",
            *(["--spec-type", spec] if spec else []), *(["--flash-attn", flash] if flash else [])]


def build(upstream: bool = False) -> dict[str, Any]:
    """Which server the llama-server systems run (`upstream`: the unpatched one), and
    llama.cpp's build line for it: ``{"kind": "native" | "xllamacpp", "version",
    "system_info"}`` (native: and ``binary``)."""
    binary = native_binary(upstream)
    if binary is None:
        from importlib import metadata

        import xllamacpp

        return {"kind": FALLBACK, "version": metadata.version("xllamacpp"),
                "system_info": str(xllamacpp.get_system_info()).strip()}
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                         timeout=60, check=False)
    version = (out.stdout + out.stderr).partition("\n")[0].strip().removeprefix("version: ")
    return {"kind": NATIVE, "binary": str(binary), "version": version,
            "system_info": native_system_info(binary)}


def native_system_info(binary: Path) -> str:
    """The native server's build line (``CPU : SSE3 = 1 | AVX = 1 | ...``).

    The server logs it at trace verbosity before it loads a model: with no model it
    would start as a router, so it is given one that does not exist and exits.
    """
    out = subprocess.run(
        [str(binary), "--verbosity", "4", "--model", "/nonexistent/ffwd-bench-probe.gguf",
         "--host", "127.0.0.1", "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False)
    return parse_system_info(out.stdout + out.stderr)


def parse_system_info(log: str) -> str:
    """The instruction-set part of llama.cpp's ``system_info:`` log line ('' if none).

    >>> parse_system_info("x\\nsystem_info: n_threads = 2 / 2 | CPU : AVX = 1 | AVX2 = 1 | \\n")
    'CPU : AVX = 1 | AVX2 = 1 |'
    """
    m = re.search(r"system_info: n_threads = [^|]*\| (.*)", log)
    return m.group(1).strip() if m else ""


def spec_type(mode: str) -> object:
    """xllamacpp's enum value for the ``--spec-type`` name `mode` (``ngram-mod`` ->
    ``COMMON_SPECULATIVE_TYPE_NGRAM_MOD``)."""
    import xllamacpp

    if mode not in MODES:
        raise ValueError(f"unknown speculation mode {mode!r}; expected one of {MODES}")
    return getattr(xllamacpp.common_speculative_type,
                   "COMMON_SPECULATIVE_TYPE_" + mode.upper().replace("-", "_"))


def main(argv: list[str] | None = None) -> int:
    """The xllamacpp fallback: llama-server's API in this process, until SIGTERM."""
    p = argparse.ArgumentParser(prog="python -m ffwd.bench.systems.llama_server")
    p.add_argument("--model", required=True, help="a .gguf file")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--spec", choices=MODES, default=None,
                   help="a draft-free speculation mode (default: none)")
    p.add_argument("--flash-attn", choices=("on", "off", "auto"), default="auto",
                   help="flash attention (default: llama.cpp's auto)")
    p.add_argument("--parallel", type=int, default=1, help="slots (default: 1)")
    p.add_argument("--verbose", action="store_true", help="llama-server's own log")
    args = p.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.port = args.port
    params.hostnames = ["127.0.0.1"]
    params.n_parallel = args.parallel
    params.kv_unified = False
    params.n_ctx = args.ctx * args.parallel
    params.n_batch = params.n_ubatch = args.batch
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.threads
    params.swa_full = True
    params.warmup = False  # the bench warms every system up the same way
    params.cache_ram_mib = 0  # as the native server's --cache-ram 0
    params.verbosity = 3 if args.verbose else 0
    if args.spec:
        params.speculative.types = [spec_type(args.spec)]
    params.flash_attn_type = {"auto": -1, "off": 0, "on": 1}[args.flash_attn]
    server = xllamacpp.Server(params)  # listens until the process ends
    print(f"llama-server listening at {server.listening_address}", file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
