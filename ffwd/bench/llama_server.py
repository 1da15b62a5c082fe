"""llama.cpp's own server (from the prebuilt `xllamacpp` wheel) as a peer process.

    python -m ffwd.bench.llama_server --model FILE.gguf --port N [--threads T]
        [--ctx N] [--batch N]

Serves llama-server's HTTP API (``/completion``, ``/v1/chat/completions``,
``/health``) on loopback until terminated: one slot, the given threads,
context and batch sizes, and the full-size sliding-window cache ffwd's
llama.cpp backend uses, so both run the same GGUF the same way.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def system_info() -> str:
    """The instruction sets the xllamacpp wheel was compiled for (it is a portable build)."""
    import xllamacpp

    return str(xllamacpp.get_system_info()).strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ffwd.bench.llama_server")
    p.add_argument("--model", required=True, help="a .gguf file")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--verbose", action="store_true", help="llama-server's own log")
    args = p.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.port = args.port
    params.hostnames = ["127.0.0.1"]
    params.n_parallel = 1
    params.n_ctx = args.ctx
    params.n_batch = params.n_ubatch = args.batch
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.threads
    params.swa_full = True
    params.warmup = False  # the bench warms every system up the same way
    params.verbosity = 3 if args.verbose else 0
    server = xllamacpp.Server(params)  # listens until the process ends
    print(f"llama-server listening at {server.listening_address}", file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
