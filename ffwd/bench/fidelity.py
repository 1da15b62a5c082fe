"""Whether systems wrote the same greedy output, and why not where they did not.

``identity`` counts, per workload, the items on which two systems wrote the
same content and calls. ``correctness`` puts together the checks `ffwd bench`
reports: fill against plain decoding in each setup the ffwd systems ran in
(the bench's default, ``:deterministic``, a KV cache type: exact where the
engine's batched and one-at-a-time forwards agree, as ``--deterministic``
promises, otherwise an agreement rate), and plain ffwd against each peer,
with the first differing id of every disagreement explained by the engine's
own logits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.bench.systems import Outcome
from ffwd.bench.systems.names import LLAMA_SERVER
from ffwd.bench.workloads import Item

PEERS = (LLAMA_SERVER, "hf-generate")


def identity(
    items: Sequence[Item], outputs: Mapping[str, Mapping[str, Any]], a: str, b: str
) -> dict[str, tuple[int, int]]:
    """Per workload: (items where `a` and `b` wrote the same content and calls, items compared)."""
    out: dict[str, tuple[int, int]] = {}
    for item in items:
        pair = outputs.get(item.key, {})
        if a not in pair or b not in pair:
            continue
        same, n = out.get(item.workload, (0, 0))
        out[item.workload] = (same + (pair[a] == pair[b]), n + 1)
    return out


def correctness(
    items: Sequence[Item], outputs: Mapping[str, Mapping[str, Any]],
    firsts: Mapping[str, Mapping[str, Outcome]], service: Any, prompts: Mapping[str, list[int]],
) -> dict[str, Any]:
    """The identity checks, and an explanation of every item where ffwd-off and a peer differ.

    A forced call (tool_choice=required, or one naming the function) goes through
    the strict tier: there ffwd-echo must match ffwd-strict; ffwd-off decodes
    plainly and may not call.
    """
    forced = [it for it in items if it.tool_choice == "required"
              or isinstance(it.tool_choice, dict)]
    free = [it for it in items if it not in forced]
    out: dict[str, Any] = {}
    for suffix in variants(outputs):  # each setup's fill modes against each other
        out |= {
            "echo_vs_off" + suffix: identity(free, outputs, "ffwd-echo" + suffix,
                                             "ffwd-off" + suffix),
            "echo_vs_strict" + suffix: identity(forced, outputs, "ffwd-echo" + suffix,
                                                "ffwd-strict" + suffix),
            "strict_vs_off" + suffix: identity(free, outputs, "ffwd-strict" + suffix,
                                               "ffwd-off" + suffix),
        }
    for peer in PEERS:
        key = "off_vs_" + peer.replace("-", "_")
        out[key] = identity(items, outputs, "ffwd-off", peer)
        out[key + "_differences"] = [
            {"item": item.id, "workload": item.workload,
             "explanation": explain_difference(service, item, prompts[item.key], peer,
                                               firsts[item.key][peer].token_ids or [])}
            for item in items
            if {"ffwd-off", peer} <= set(outputs.get(item.key, {}))
            and outputs[item.key]["ffwd-off"] != outputs[item.key][peer]
        ]
    return out


def variants(outputs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The setups the ffwd systems ran in, as name suffixes: ``""`` (the bench's
    default) first, then ``":deterministic"``, ``":kv-f16"``, ... in name order."""
    names = {n for by_system in outputs.values() for n in by_system if n.startswith("ffwd-")}
    found = dict.fromkeys(n.partition(":")[1] + n.partition(":")[2] for n in names)
    return ["", *sorted(s for s in found if s)]


def explain_difference(
    service: Any, item: Item, prompt_ids: list[int], peer: str, peer_ids: list[int]
) -> str:
    """Where ffwd-off's greedy ids leave the peer's, and how close the two logits were.

    Re-decodes plainly on the bench's engine (the server reports text, not
    ids; an ``auto`` request for a forced call renders the same prompt) and
    scores both choices after prompt + the shared prefix.
    """
    from ffwd.engine.core.generate import generate

    service.backend.reset()  # nothing of an earlier run in its cache
    off = generate(service.backend, service.tokenizer, prompt_ids,
                   max_tokens=item.max_tokens).token_ids
    i = next((k for k, (a, b) in enumerate(zip(off, peer_ids, strict=False)) if a != b), None)
    if i is None:
        return (f"the same ids over the first {min(len(off), len(peer_ids))}; only where each "
                "stopped differs")
    service.backend.reset()  # nothing of an earlier run in its cache
    service.backend.prefill(prompt_ids + peer_ids[:i])
    row = service.backend.last_logits
    gap = float(row[off[i]] - row[peer_ids[i]])
    dec = service.tokenizer.decode
    why = "a near tie, rounded apart by different kernels or forward shapes" if abs(gap) < 0.05 \
        else "not a rounding tie"
    return (f"first differs at output id {i}: ffwd-off {dec([off[i]])!r}, {peer} "
            f"{dec([peer_ids[i]])!r}; logit gap on this engine {gap:+.2e} ({why})")
