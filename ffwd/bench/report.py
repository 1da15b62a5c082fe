"""From run records to numbers, verdicts, a Markdown report and a bar chart.

Everything here is pure except `plot`: ``summarize(runs)`` aggregates the
records ``{workload, item, system, repeat, tokens, seconds, forward_calls,
injected, verify_accepted, verify_rejected, parsed}`` per workload row and
system; ``speedups``, ``check_targets`` and ``default_fill`` read that summary;
``render_markdown(results)`` formats the whole results dict that
`ffwd.bench.cli` writes to ``results.json``.

Throughput is output ids (injected ones included) per second of decoding
(wall time minus prefill, which fill does not touch) over a repeat's items; a
speedup is the ratio of two systems' median throughputs. Where two systems
wrote the same output this is their decode-time ratio; where outputs differ
(a forced call against plain decoding) it still compares cost per token.
End-to-end throughput divides the same ids by the whole requests' time
(prefill, serving and HTTP included).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

BASELINE = "ffwd-off"
LLAMA_SERVER = "llama-server"
PROSE_BUDGET = 0.03  # prose: ffwd-echo may be at most 3% slower than ffwd-off


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def summarize(
    runs: Iterable[Mapping[str, Any]], order: Sequence[str] = ()
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{workload: {system: metrics}}``, systems in `order` (then as they first appear)."""
    rank = {name: i for i, name in enumerate(order)}
    runs = sorted(runs, key=lambda r: rank.get(r["system"], len(rank)))
    groups: dict[str, dict[str, dict[int, list[Mapping[str, Any]]]]] = {}
    for r in runs:
        by_repeat = groups.setdefault(r["workload"], {}).setdefault(r["system"], {})
        by_repeat.setdefault(r["repeat"], []).append(r)
    return {
        workload: {system: _metrics(reps) for system, reps in systems.items()}
        for workload, systems in groups.items()
    }


def _metrics(reps: Mapping[int, list[Mapping[str, Any]]]) -> dict[str, Any]:
    seconds = [sum(r["seconds"] for r in rs) for rs in reps.values()]
    prefill = [sum(r["prefill_seconds"] for r in rs) for rs in reps.values()]
    tokens = [sum(r["tokens"] for r in rs) for rs in reps.values()]
    decode = [s - p for s, p in zip(seconds, prefill, strict=True)]
    rates = [t / d if d > 0 else 0.0 for t, d in zip(tokens, decode, strict=True)]
    e2e = [t / s if s > 0 else 0.0 for t, s in zip(tokens, seconds, strict=True)]
    every = [r for rs in reps.values() for r in rs]
    first = [statistics.fmean(r.get("first_token_seconds", r["prefill_seconds"]) for r in rs)
             for rs in reps.values()]
    n_tokens = sum(r["tokens"] for r in every)
    forwards = [r["forward_calls"] for r in every]
    accepted = sum(r["verify_accepted"] for r in every)
    verified = accepted + sum(r["verify_rejected"] for r in every)
    parsed = [r["parsed"] for r in every if r.get("parsed") is not None]
    call_runs = [r for r in every if r.get("parsed")]
    call_tokens = sum(r["tokens"] for r in call_runs)
    return {
        "items": len(next(iter(reps.values()))),
        "repeats": len(reps),
        "tokens": _median(tokens),
        "seconds": _median(seconds),
        "seconds_min": min(seconds),
        "seconds_max": max(seconds),
        "prefill_seconds": _median(prefill),
        "tokens_per_s": _median(rates),
        "e2e_tokens_per_s": _median(e2e),
        "first_token_seconds": _median(first),  # per request
        "forwards_per_token": (
            sum(forwards) / n_tokens if n_tokens and None not in forwards else None
        ),
        "injected_fraction": sum(r["injected"] for r in every) / n_tokens if n_tokens else 0.0,
        "accepted_fraction": accepted / verified if verified else None,
        "parse_rate": sum(parsed) / len(parsed) if parsed else None,
        # the same share over outputs that parsed as calls only (what replay measures)
        "injected_fraction_calls": (
            sum(r["injected"] for r in call_runs) / call_tokens if call_tokens else None
        ),
    }


def speedups(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """``{workload: {system: {peer: throughput ratio}}}`` for every pair."""
    out: dict[str, Any] = {}
    for workload, systems in summary.items():
        rates = {name: m["tokens_per_s"] for name, m in systems.items()}
        out[workload] = {
            a: {b: (ra / rb if rb else None) for b, rb in rates.items() if b != a}
            for a, ra in rates.items()
        }
    return out


# --- targets ---------------------------------------------------------------------


def _ratio(sp: Mapping[str, Any], workload: str, a: str, b: str) -> float | None:
    value = sp.get(workload, {}).get(a, {}).get(b)
    return None if value is None else float(value)


def _target(name: str, value: float | None, goal: str, met: bool | None) -> dict[str, Any]:
    return {"target": name, "value": value, "goal": goal, "met": met}


def check_targets(
    summary: Mapping[str, Mapping[str, Mapping[str, Any]]],
    sp: Mapping[str, Any],
    bound: Mapping[str, float],
    engine: str | None = None,
) -> list[dict[str, Any]]:
    """The issues' targets, each with the measured value and whether it is met (None: not run).

    `engine` is what the bare ffwd systems ran on; the llama.cpp targets need it.
    """
    out = _fill_targets(summary, sp, bound)
    if engine != "llamacpp":
        return out
    v = _overall_ratio(summary, BASELINE, LLAMA_SERVER)
    out.append(_target("all workloads: ffwd-off vs llama-server (decode tok/s)", v, ">= 0.9x",
                       None if v is None else v >= 0.9))
    v = _e2e_ratio(summary, "tools/required", "ffwd-strict", LLAMA_SERVER)
    out.append(_target("tools/required: ffwd-strict vs llama-server (end-to-end tok/s)", v,
                       ">= 1.3x", None if v is None else v >= 1.3))
    v = _ratio(sp, "tools/required", "ffwd-strict", BASELINE)
    out.append(_target("tools/required: ffwd-strict vs ffwd-off on llama.cpp (decode tok/s)", v,
                       ">= 1.3x", None if v is None else v >= 1.3))
    v = _overall_ratio(summary, BASELINE, BASELINE + ":transformers")
    out.append(_target("all workloads: ffwd-off on llama.cpp vs on transformers (decode tok/s)",
                       v, ">= 4x", None if v is None else v >= 4.0))
    return out


def _fill_targets(
    summary: Mapping[str, Mapping[str, Mapping[str, Any]]],
    sp: Mapping[str, Any],
    bound: Mapping[str, float],
) -> list[dict[str, Any]]:
    out = []
    for peer, goal in ((BASELINE, 2.0), ("hf-prompt-lookup", 1.2)):
        v = _ratio(sp, "echo", "ffwd-echo", peer)
        out.append(_target(f"echo: ffwd-echo vs {peer}", v, f">= {goal}x",
                           None if v is None else v >= goal))
    v = _ratio(sp, "tools/required", "ffwd-strict", BASELINE)
    out.append(_target("tools/required: ffwd-strict vs ffwd-off", v, ">= 1.5x",
                       None if v is None else v >= 1.5))
    strict = summary.get("tools/required", {}).get("ffwd-strict")
    gap = None
    if strict is not None and "required" in bound:
        gap = bound["required"] - strict["injected_fraction"]
    out.append(_target("tools/required: replay bound - injected fraction (ffwd-strict)", gap,
                       "<= 0.10", None if gap is None else gap <= 0.10))
    v = _ratio(sp, "prose", "ffwd-echo", BASELINE)
    out.append(_target("prose: ffwd-echo vs ffwd-off", v, f">= {1 - PROSE_BUDGET:.2f}x",
                       None if v is None else v >= 1 - PROSE_BUDGET))
    v = _overall_ratio(summary, BASELINE, "hf-generate")
    out.append(_target("all workloads: ffwd-off vs hf-generate (decode tok/s)", v, ">= 1.0x",
                       None if v is None else v >= 1.0))
    return out


def _e2e_ratio(
    summary: Mapping[str, Mapping[str, Mapping[str, Any]]], workload: str, a: str, b: str
) -> float | None:
    rows = summary.get(workload, {})
    if a not in rows or b not in rows or not rows[b]["e2e_tokens_per_s"]:
        return None
    return float(rows[a]["e2e_tokens_per_s"] / rows[b]["e2e_tokens_per_s"])


def _overall_ratio(summary: Mapping[str, Mapping[str, Mapping[str, Any]]], a: str, b: str
                   ) -> float | None:
    """Decode throughput of `a` over `b` on everything both ran (median totals summed)."""
    rates = []
    for name in (a, b):
        rows = [s[name] for s in summary.values() if a in s and b in s]
        decode = sum(m["seconds"] - m["prefill_seconds"] for m in rows)
        rates.append(sum(m["tokens"] for m in rows) / decode if decode > 0 else None)
    ra, rb = rates
    return ra / rb if ra is not None and rb else None


def default_fill(sp: Mapping[str, Any]) -> dict[str, Any]:
    """The issue's rule: ``echo`` when prose costs at most 3% under echo, else ``strict``."""
    v = _ratio(sp, "prose", "ffwd-echo", BASELINE)
    if v is None:
        return {"fill": None, "reason": "prose was not measured with ffwd-echo and ffwd-off"}
    overhead = 1 / v - 1
    fill = "echo" if overhead <= PROSE_BUDGET else "strict"
    return {"fill": fill, "prose_overhead": overhead,
            "reason": f"prose under ffwd-echo takes {overhead:+.1%} time vs ffwd-off "
                      f"(budget {PROSE_BUDGET:.0%})"}


# --- Markdown ----------------------------------------------------------------------


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.0%}"


def main_table(summary: Mapping[str, Any], sp: Mapping[str, Any]) -> list[str]:
    lines = [
        "| workload | system | items | tokens | wall s (min–max) | prefill s | first token s "
        "| decode tok/s | e2e tok/s | fwd/token | injected | accepted | parse | vs ffwd-off |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for workload, systems in summary.items():
        for name, m in systems.items():
            vs = sp[workload].get(name, {}).get(BASELINE) if name != BASELINE else 1.0
            lines.append(
                f"| {workload} | {name} | {m['items']} | {m['tokens']:.0f} | "
                f"{m['seconds']:.2f} ({m['seconds_min']:.2f}–{m['seconds_max']:.2f}) | "
                f"{m['prefill_seconds']:.2f} | {m.get('first_token_seconds', 0.0):.3f} | "
                f"{m['tokens_per_s']:.1f} | {m.get('e2e_tokens_per_s', 0.0):.1f} | "
                f"{_num(m['forwards_per_token'])} | "
                f"{_pct(m['injected_fraction'])} | {_pct(m['accepted_fraction'])} | "
                f"{_pct(m['parse_rate'])} | {_num(vs, '{:.2f}x')} |"
            )
    return lines


def speedup_tables(sp: Mapping[str, Any]) -> list[str]:
    lines = []
    for workload, rows in sp.items():
        names = list(rows)
        lines += ["", f"**{workload}** (row vs column, decode tokens/s ratio)", "",
                  "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for a in names:
            cells = ["" if a == b else _num(rows[a].get(b), "{:.2f}x") for b in names]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines


def correctness_lines(c: Mapping[str, Any]) -> list[str]:
    lines = ["| check | workload | identical | items |", "|---|---|---:|---:|"]
    peers = (("off_vs_llama_server", "llama-server"), ("off_vs_hf_generate", "hf-generate"))
    for key, label in (("echo_vs_off", "ffwd-echo == ffwd-off"),
                       ("echo_vs_strict", "ffwd-echo == ffwd-strict (forced call)"),
                       ("strict_vs_off", "ffwd-strict == ffwd-off"),
                       *((k, f"ffwd-off == {p}") for k, p in peers)):
        for workload, (same, n) in c.get(key, {}).items():
            lines.append(f"| {label} | {workload} | {_pct(same / n if n else None)} | {n} |")
    for key, peer in peers:
        diffs = c.get(key + "_differences", [])
        if diffs:
            lines += ["", f"ffwd-off vs {peer}, where they differ:", ""]
            lines += [f"- `{d['item']}` ({d['workload']}): {d['explanation']}" for d in diffs]
    return lines


def render_markdown(results: Mapping[str, Any]) -> str:
    env, settings = results["environment"], results["settings"]
    summary, sp = results["summary"], results["speedups"]
    lines = [
        "# ffwd bench", "",
        f"Command: `{settings['command']}`", "",
        f"Model {env['model']} ({env['model_path']}), ffwd systems on "
        f"{env.get('backend', 'transformers')} (weights: {env['dtype']}), "
        f"{env['threads']} threads on {env['cpu']} ({env['cpu_count']} cores), "
        f"torch {env['torch']}, transformers {env['transformers']}, "
        f"llama-cpp-python {env.get('llama_cpp') or '—'}, Python {env['python']}. "
        f"Repeats: {settings['repeats']}, interleaved; load average "
        f"{env['load_before']} before, {env['load_after']} after. Fill settings: "
        + (", ".join(f"{k}={v}" for k, v in settings.get("fill", {}).items()) or "defaults")
        + ".", "",
        *(f"{label}: `{env[key]}`  " for key, label in (
            ("llama_cpp_system_info", "llama.cpp (ffwd)"),
            ("llama_server_system_info", f"llama-server (xllamacpp {env.get('xllamacpp')})"))
          if env.get(key)),
        "",
        "## Results", "",
        "Medians over repeats of each workload's totals. wall s = whole requests (ffwd: "
        "template, tool rows, prefill, decode, parse, HTTP); prefill s = until decoding "
        "starts; first token s = until the first output reached the client (per request; "
        "ffwd's tool-call parser holds back markup until a call's name is known); "
        "decode tok/s = output ids (injected included) per second after prefill, which "
        "is what speedups compare; e2e tok/s = the same ids over the whole requests; "
        "fwd/token = model forward calls (prefill included) per output id; "
        "injected = share of output ids fast-forwarded; accepted = share of "
        "verified (echo) ids the model agreed with; parse = outputs that parse as calls of "
        "listed functions.", "",
        *main_table(summary, sp),
    ]
    if results.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(f"`{k}`: {v}" for k, v in results["skipped"].items())]
    lines += ["", "## Speedups", *speedup_tables(sp)]
    if results.get("bound"):
        lines += ["", "## Replay bound (tools)", "",
                  "Replay: the share of the ground-truth calls' ids (through the end of the "
                  "turn) that the strict rows inject, without a model. Measured: the share of "
                  "ffwd-strict's output ids injected, over all outputs and over those that "
                  "parsed as calls.", "",
                  "| tool_choice | replay bound | ffwd-strict injected | … on parsed calls |",
                  "|---|---:|---:|---:|"]
        for choice, frac in results["bound"].items():
            strict = summary.get(f"tools/{choice}", {}).get("ffwd-strict", {})
            lines.append(
                f"| {choice} | {frac:.0%} | {_pct(strict.get('injected_fraction'))} | "
                f"{_pct(strict.get('injected_fraction_calls'))} |"
            )
    lines += ["", "## Correctness (greedy)", "", *correctness_lines(results["correctness"])]
    lines += ["", "## Targets", "", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for t in results["targets"]:
        met = {True: "yes", False: "**no**", None: "not run"}[t["met"]]
        lines.append(f"| {t['target']} | {_num(t['value'])} | {t['goal']} | {met} |")
    d = results["default_fill"]
    lines += ["", f"Recommended default fill: **{d['fill']}** — {d['reason']}.", ""]
    return "\n".join(lines)


# --- plot -------------------------------------------------------------------------


def plot(summary: Mapping[str, Any], sp: Mapping[str, Any], path: Path) -> None:
    """A grouped bar chart: throughput vs ffwd-off per workload (bars) and system (colours)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(summary)
    systems = [s for s in dict.fromkeys(n for w in workloads for n in summary[w]) if s != BASELINE]
    width = 0.8 / max(1, len(systems))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(workloads)) + 2.0, 4.0))
    for i, name in enumerate(systems):
        xs = [w + (i - (len(systems) - 1) / 2) * width for w in range(len(workloads))]
        ys = [sp[w].get(name, {}).get(BASELINE) or 0.0 for w in workloads]
        ax.bar(xs, ys, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel("speedup vs ffwd-off (decode tokens/s)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
