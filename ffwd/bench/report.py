"""From run records to numbers, verdicts, a Markdown report and a bar chart.

Everything here is pure except `plot`: ``summarize(runs)`` aggregates the
records ``{workload, item, system, repeat, tokens, seconds, forward_calls,
injected, verify_accepted, verify_rejected, parsed}`` per workload row and
system; ``speedups``, ``check_targets`` and ``default_fill`` read that summary;
``render_markdown(results)`` formats the whole results dict that
`ffwd.cli.bench` writes to ``results.json``.

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

from ffwd.bench import concurrency_report, contention, latency, spans

# check_targets and default_fill live in ffwd.bench.targets; importers read them here
from ffwd.bench.systems.names import LLAMA_SERVER
from ffwd.bench.targets import BASELINE, best_speculation
from ffwd.bench.targets import check_targets as check_targets
from ffwd.bench.targets import default_fill as default_fill


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
        "injected_by_origin": _origins(every, n_tokens),
        "accepted_fraction": accepted / verified if verified else None,
        "parse_rate": sum(parsed) / len(parsed) if parsed else None,
        # the same share over outputs that parsed as calls only (what replay measures)
        "injected_fraction_calls": (
            sum(r["injected"] for r in call_runs) / call_tokens if call_tokens else None
        ),
    }


def _origins(runs: Sequence[Mapping[str, Any]], n_tokens: int) -> dict[str, float]:
    """Share of output ids injected per source (ffwd: strict, grammar, echo, recall)."""
    total: dict[str, int] = {}
    for r in runs:
        for origin, n in (r.get("origins") or {}).items():
            total[origin] = total.get(origin, 0) + n
    return {k: v / n_tokens for k, v in total.items()} if n_tokens else {}


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


def peer_sections(summary: Mapping[str, Any]) -> list[str]:
    """ffwd-echo beside llama.cpp's draft-free speculation, and where ffwd's injected ids
    came from (sections of the report; empty where those systems did not run)."""
    names = [n for n in dict.fromkeys(k for rows in summary.values() for k in rows)
             if n.startswith(("ffwd-echo", LLAMA_SERVER))]
    lines: list[str] = []
    if any(n.startswith(LLAMA_SERVER + ":") for n in names) and "ffwd-echo" in names:
        lines += ["", "## ffwd-echo and llama.cpp's speculation", "",
                  "Decode tok/s (accepted share of verified or drafted ids):", "",
                  "| workload | " + " | ".join(names) + " | ffwd-echo vs best mode |",
                  "|---|" + "---:|" * (len(names) + 1)]
        for workload, rows in summary.items():
            cells = ["—" if n not in rows else f"{rows[n]['tokens_per_s']:.1f} "
                     f"({_pct(rows[n]['accepted_fraction'])})" for n in names]
            best = best_speculation(rows)
            vs = (rows["ffwd-echo"]["tokens_per_s"] / rows[best]["tokens_per_s"]
                  if best and "ffwd-echo" in rows and rows[best]["tokens_per_s"] else None)
            lines.append(f"| {workload} | " + " | ".join(cells)
                         + f" | {_num(vs, '{:.2f}x')} ({best or '—'}) |")
    sources = [(w, n, m["injected_by_origin"]) for w, rows in summary.items()
               for n, m in rows.items() if m.get("injected_by_origin")]
    if sources:
        origins = list(dict.fromkeys(k for _, _, o in sources for k in o))
        lines += ["", "Share of output ids fast-forwarded, by source:", "",
                  "| workload | system | " + " | ".join(origins) + " |",
                  "|---|---|" + "---:|" * len(origins)]
        lines += [f"| {w} | {n} | " + " | ".join(_pct(o.get(k, 0.0)) for k in origins) + " |"
                  for w, n, o in sources]
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


FILL_CHECKS = {"echo_vs_off": "ffwd-echo{v} == ffwd-off{v}",
               "echo_vs_strict": "ffwd-echo{v} == ffwd-strict{v} (forced call)",
               "strict_vs_off": "ffwd-strict{v} == ffwd-off{v}"}
PEER_CHECKS = {"off_vs_llama_server": "llama-server", "off_vs_hf_generate": "hf-generate"}


def correctness_lines(c: Mapping[str, Any]) -> list[str]:
    """The identity checks (fill modes per setup, ``echo_vs_off:deterministic`` ...; ffwd-off
    against each peer), then every difference from a peer explained."""
    lines = ["| check | workload | identical | items |", "|---|---|---:|---:|"]
    for key, rows in c.items():
        check, colon, variant = key.partition(":")
        if check in FILL_CHECKS:
            label = FILL_CHECKS[check].format(v=colon + variant)
        elif check in PEER_CHECKS:
            label = f"ffwd-off == {PEER_CHECKS[check]}"
        else:
            continue  # the differences, below
        for workload, (same, n) in rows.items():
            lines.append(f"| {label} | {workload} | {_pct(same / n if n else None)} | {n} |")
    for key, peer in PEER_CHECKS.items():
        diffs = c.get(key + "_differences", [])
        if diffs:
            lines += ["", f"ffwd-off vs {peer}, where they differ:", ""]
            lines += [f"- `{d['item']}` ({d['workload']}): {d['explanation']}" for d in diffs]
    return lines


def build_lines(env: Mapping[str, Any]) -> list[str]:
    """What each kind of system ran as, with llama.cpp's (or torch's) build line."""
    builds = env.get("builds")
    if builds is None:  # a results.json from before the builds were recorded
        builds = [{"systems": "ffwd (llama.cpp)", "build": "",
                   "system_info": env.get("llama_cpp_system_info", "")}]
    return [f"- {b['systems']}: {b['build']}" + (f" — `{b['system_info']}`"
                                                  if b.get("system_info") else "")
            for b in builds]


def fallback_note(env: Mapping[str, Any]) -> list[str]:
    """A warning where llama-server ran from the xllamacpp wheel rather than a native build."""
    server = env.get("llama_server") or {}
    if server.get("kind") != "xllamacpp":
        return []
    return ["", f"**llama-server here is the xllamacpp {server.get('version')} fallback**, a "
                "prebuilt portable wheel whose kernels may be older than the engine's: not a "
                "fair peer. `make peers` builds the native one."]


def bound_lines(bound: Mapping[str, float], summary: Mapping[str, Any]) -> list[str]:
    """The replay bound beside what ffwd-strict injected (empty where tools did not run)."""
    if not bound:
        return []
    lines = ["", "## Replay bound (tools)", "",
             "Replay: the share of the ground-truth calls' ids (through the end of the "
             "turn) that the strict rows inject, without a model. Measured: the share of "
             "ffwd-strict's output ids injected, over all outputs and over those that "
             "parsed as calls.", "",
             "| tool_choice | replay bound | ffwd-strict injected | … on parsed calls |",
             "|---|---:|---:|---:|"]
    for choice, frac in bound.items():
        strict = summary.get(f"tools/{choice}", {}).get("ffwd-strict", {})
        lines.append(f"| {choice} | {frac:.0%} | {_pct(strict.get('injected_fraction'))} | "
                     f"{_pct(strict.get('injected_fraction_calls'))} |")
    return lines


def attention_lines(env: Mapping[str, Any]) -> list[str]:
    """The attention paths ffwd's load timed, and the one it chose (llama.cpp only); and what
    greedy output the ffwd systems promise there."""
    promise = ([] if not env.get("greedy_determinism") else
               ["", f"Greedy determinism of the ffwd systems: {env['greedy_determinism']}"])
    if not env.get("attention"):
        return promise
    return ["", "ffwd's attention path, as its load timed each (ms per forward of 1 id/16 "
            "ids by cache depth, an agent turn's expected time, memory):", "", "```",
            *env["attention"], "```", *promise]


def optional_sections(results: Mapping[str, Any]) -> list[str]:
    """The report's sections of the rows and workloads that ran (span lengths, prefill,
    contention, concurrency)."""
    out: list[str] = []
    span_lines = spans.markdown(results.get("runs") or [])
    if span_lines:
        out += ["", "## Span lengths", "", *span_lines]
    if results.get("prefill"):
        out += ["", "## Prefill: time to first token", "", latency.EXPLAIN, "",
                *latency.markdown(results["prefill"])]
    if results.get("contention"):
        out += ["", "## Contention: decode beside other work", "",
                *contention.markdown(results["contention"])]
    if results.get("concurrency"):
        out += ["", "## Concurrency: many clients at once", "",
                *concurrency_report.markdown(results["concurrency"])]
    return out


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
        "Builds:", "", *build_lines(env), *fallback_note(env), *attention_lines(env),
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
        "verified ids (echo's and recall's copies, llama-server's drafts) the model agreed "
        "with; parse = outputs that parse as calls of listed functions (tools, and the "
        "agent's call steps).", "",
        *(main_table(summary, sp) if summary else ["No decode workload ran."]),
        *peer_sections(summary),
    ]
    lines += optional_sections(results)
    if results.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(f"`{k}`: {v}" for k, v in results["skipped"].items())]
    lines += ["", "## Speedups", *speedup_tables(sp)] if sp else []
    lines += bound_lines(results.get("bound") or {}, summary)
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
