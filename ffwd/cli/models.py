"""`ffwd models`: what ffwd can serve from where models live here, read from their files.

One row per model: the name ``--model`` takes for it, where it lives (embedded,
the Hub cache, Ollama, LM Studio), its size, quantization, context length, the
tool-call format its chat template writes and whether it reasons. Nothing is
loaded and the network is never reached.
"""

from __future__ import annotations

import argparse
import json
import sys

COLUMNS = ("name", "where", "size", "quant", "context", "tools", "reasons", "path")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object per model")


def main(args: argparse.Namespace) -> int:
    from ffwd.models import list_models

    try:
        found = list_models()
    except (ValueError, OSError) as exc:
        print(f"ffwd models: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for listed in found:
            print(json.dumps(listed.as_dict(), ensure_ascii=False))
        return 0
    rows = [COLUMNS, *(_row(m) for m in found)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    for r in rows:
        print("  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]))
    return 0


def _row(m: object) -> tuple[str, ...]:
    from ffwd.models import Listed

    assert isinstance(m, Listed)
    reasons = "-" if m.reasons is None else "yes" if m.reasons else "no"
    return (m.name, m.place, f"{m.size / 2**20:.1f} MiB", m.quantization or "-",
            str(m.context_length or "-"), m.tool_format, reasons, m.path)
