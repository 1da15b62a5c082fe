"""A first forward of a GGUF model in a child process, so a native crash is a message.

A library built with kernels that are broken on this CPU (ggml's AMX kernels
under GCC 12, llama.cpp #20824) or a driver that fails takes the whole
process down with a signal, and no Python code runs to say why. `first_forward`
runs the forward that crashed there (a prompt of several ids, then a batched
forward and a one-id step) in ``python -m ffwd.engine.llama.probe`` with the
engine's own settings, on every attention path the loader may time, and
returns one line saying what failed, or the child's `LoadReport` (where
llama.cpp put the weights and the cache).
`ffwd.models` runs it at a model's first load and caches a success.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys

from ffwd.engine.llama.native import LoadReport

PROBE_IDS = 24  # a prompt long enough for every batched kernel's tiling


def first_forward(path: str, *, threads: int, kv_cache: str, n_gpu_layers: str | int,
                  deterministic: bool = False, flash_attn: str = "auto",
                  timeout: float = 900.0) -> LoadReport | str:
    """Where the model went when a first forward of `path` runs here, else what failed
    (one line)."""
    cmd = [sys.executable, "-X", "faulthandler", "-m", "ffwd.engine.llama.probe", path,
           "--threads", str(threads), "--kv-cache", kv_cache, "--n-gpu-layers", str(n_gpu_layers),
           "--flash-attn", flash_attn, *(["--deterministic"] if deterministic else [])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"a first forward did not finish in {timeout:.0f} s"
    if proc.returncode == 0:
        return LoadReport.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    return exit_message(proc.returncode, proc.stderr)


def exit_message(returncode: int, stderr: str) -> str:
    """What a child's exit says, in one line: the signal that killed it, or its last error.

    >>> exit_message(-11, "Fatal Python error: Segmentation fault\\n\\nCurrent thread:")
    'llama.cpp crashed (SIGSEGV) on a first forward (Fatal Python error: Segmentation fault)'
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = next((ln for ln in lines if ln.startswith(("Fatal Python error", "GGML_ASSERT"))),
                next((ln for ln in reversed(lines) if not ln.startswith(("File ", "Current "))),
                     ""))
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"llama.cpp crashed ({name}) on a first forward" + (f" ({last})" if last else "")
    return f"a first forward failed (exit code {returncode}): {last}"


def _run(args: argparse.Namespace) -> None:
    from ffwd.engine.llama.context import LlamaContext

    ctx = LlamaContext(args.path, n_ctx=256, threads=args.threads, kv_cache=args.kv_cache,
                       n_gpu_layers=args.n_gpu_layers, flash_attn=args.flash_attn,
                       deterministic=args.deterministic)
    backend = ctx.sequences[0]
    ids = [(7 * i + 3) % backend.vocab_size for i in range(PROBE_IDS)]
    for i, path in enumerate(ctx.paths):
        if i:
            ctx.use_attention(path)
        backend.prefill(ids)
        backend.forward(ids[:8])
        backend.append(ids[:1])
    print(json.dumps(ctx.load.as_dict()))
    ctx.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--kv-cache", default="auto")
    p.add_argument("--n-gpu-layers", default="auto")
    p.add_argument("--flash-attn", default="auto")
    p.add_argument("--deterministic", action="store_true")
    args = p.parse_args(argv)
    if args.n_gpu_layers not in ("auto", "all"):
        args.n_gpu_layers = int(args.n_gpu_layers)
    _run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
