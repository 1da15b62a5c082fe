"""llama.cpp's own server (from the prebuilt `xllamacpp` wheel) as a peer process.

    python -m ffwd.bench.systems.llama_server --model FILE.gguf --port N [--threads T]
        [--ctx N] [--batch N] [--spec MODE]

Serves llama-server's HTTP API (``/completion``, ``/v1/chat/completions``,
``/health``) on loopback until terminated: one slot, the given threads,
context and batch sizes, and the full-size sliding-window cache ffwd's
llama.cpp backend uses, so both run the same GGUF the same way.

``--spec`` turns on one of llama.cpp's draft-free speculation modes
(`MODES`, its ``--spec-type``) with llama.cpp's own defaults for that
mode, as a user of ``llama-server --spec-type MODE`` gets them. Some keep
state from one request to the next (``ngram-mod``'s hash pool is shared by
all requests, ``ngram-map-k`` drafts more on a prompt it saw before): only a
fresh process starts empty. Each response's ``timings`` then carries
``draft_n`` (ids drafted) and ``draft_n_accepted`` (ids kept).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from ffwd.bench.systems.names import EXTRA_SPEC_MODES, SPEC_MODES

MODES = (*SPEC_MODES, *EXTRA_SPEC_MODES)  # llama-server's --spec-type names, no draft model


def system_info() -> str:
    """The instruction sets the xllamacpp wheel was compiled for (it is a portable build)."""
    import xllamacpp

    return str(xllamacpp.get_system_info()).strip()


def spec_type(mode: str) -> object:
    """xllamacpp's enum value for the ``--spec-type`` name `mode` (``ngram-mod`` ->
    ``COMMON_SPECULATIVE_TYPE_NGRAM_MOD``)."""
    import xllamacpp

    if mode not in MODES:
        raise ValueError(f"unknown speculation mode {mode!r}; expected one of {MODES}")
    return getattr(xllamacpp.common_speculative_type,
                   "COMMON_SPECULATIVE_TYPE_" + mode.upper().replace("-", "_"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ffwd.bench.systems.llama_server")
    p.add_argument("--model", required=True, help="a .gguf file")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--spec", choices=MODES, default=None,
                   help="a draft-free speculation mode (default: none)")
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
    if args.spec:
        params.speculative.types = [spec_type(args.spec)]
    server = xllamacpp.Server(params)  # listens until the process ends
    print(f"llama-server listening at {server.listening_address}", file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
