"""CPU per output id outside ggml, served and streamed: ffwd serve beside llama-server.

    python -m tools.overhead [--tokens 300] [--rounds 3] [--flash off] [--parallel 4]

Each round streams one greedy prose reply of `--tokens` ids (the end of turn held off
with a logit bias) from each server in turn, while ``perf record`` samples that
server's process (all its threads, ``cpu-clock`` at 999 Hz). A sample is ggml's when
its symbol is ggml's or OpenMP's (libggml*, libgomp, ``ggml_*``, ``gomp_*``): the
forward's own compute and its threads' barriers. Everything else is the server's own
work around the forward: HTTP, JSON, sampling, the text layer, graph building,
scheduling. The table gives that per output id (median over rounds), its split by
where it ran (shared object), and the servers' decode ids/s. Both servers run the
same GGUF on the same threads, context and attention path (`--flash`), built from the
same source (`make peers`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

HZ = 999
PROMPT = "Write a long story about a lighthouse keeper and the sea, in many chapters."
GGML = re.compile(r"ggml|gomp|GOMP|omp_", re.IGNORECASE)


def stream(url: str, tokens: int, eos: int) -> tuple[int, float]:
    """One streamed reply: the ids it carried (by the server's usage) and its seconds."""
    body = {"model": "default", "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": {str(eos): -100}}
    t0, n = time.perf_counter(), 0
    with httpx.Client(timeout=600) as c, c.stream("POST", url + "/v1/chat/completions",
                                                 json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                n = usage["completion_tokens"] if usage else n
    return n, time.perf_counter() - t0


def sampled(pid: int, url: str, tokens: int, eos: int) -> tuple[Counter[str], int, float]:
    """Samples outside ggml by shared object, the ids streamed and the seconds, for one
    reply while `perf` samples process `pid`."""
    out = Path(tempfile.mkstemp(suffix=".perf")[1])
    perf = subprocess.Popen(["perf", "record", "-F", str(HZ), "-p", str(pid), "-o", str(out),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    n, seconds = stream(url, tokens, eos)
    perf.send_signal(signal.SIGINT)
    perf.wait(60)
    report = subprocess.run(["perf", "report", "-i", str(out), "--stdio", "-n",
                             "--sort", "dso,sym"], capture_output=True, text=True).stdout
    out.unlink(missing_ok=True)
    outside: Counter[str] = Counter()
    for line in report.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m and not GGML.search(m.group(2) + " " + m.group(3)):
            outside[m.group(2)] += int(m.group(1))
    return outside, n, seconds


def servers(args: argparse.Namespace) -> list[tuple[str, Any]]:
    from ffwd.bench.systems.servers import ChildServer, free_port, llama_server
    from ffwd.models import resolve_model

    gguf = str(resolve_model("default").path)
    port = free_port()
    ffwd = ChildServer("ffwd", [sys.executable, "-m", "ffwd.cli", "serve", "--port", str(port),
                                "--threads", str(args.threads), "--fill", "off",
                                "--flash-attn", args.flash, "--kv-cache", "f16",
                                "--parallel", str(args.parallel)], port,
                       env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    peer = llama_server(gguf, args.threads, 8192, 512, flash=args.flash,
                        parallel=args.parallel)
    return [("ffwd serve", ffwd), ("llama-server", peer)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.overhead", description=__doc__)
    p.add_argument("--tokens", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--flash", default="off", choices=("on", "off"))
    p.add_argument("--parallel", type=int, default=4)
    args = p.parse_args(argv)
    from ffwd.models import load_tokenizer

    eos = int(load_tokenizer("default").eos_token_id)
    running = servers(args)
    results: dict[str, list[tuple[Counter[str], int, float]]] = {n: [] for n, _ in running}
    try:
        for _, server in running:  # warm: each server's first reply is not timed
            stream(server.url, 16, eos)
        for _ in range(args.rounds):
            for name, server in running:
                results[name].append(sampled(server.proc.pid, server.url, args.tokens, eos))
    finally:
        for _, server in running:
            server.stop()
    print(f"load average {os.getloadavg()}; {args.tokens} ids a reply, {args.rounds} rounds, "
          f"--threads {args.threads}, -fa {args.flash}, --parallel {args.parallel}")
    print("| server | ms of CPU per output id outside ggml (median) | where | decode ids/s |")
    print("|---|---:|---|---:|")
    for name, runs in results.items():
        per_id = [1000 * sum(c.values()) / HZ / n for c, n, _ in runs]
        where = sum((c for c, _, _ in runs), Counter())
        total = sum(where.values()) or 1
        split = ", ".join(f"{dso} {100 * k / total:.0f}%" for dso, k in where.most_common(4))
        speed = statistics.median(n / s for _, n, s in runs)
        print(f"| {name} | {statistics.median(per_id):.3f} | {split} | {speed:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
