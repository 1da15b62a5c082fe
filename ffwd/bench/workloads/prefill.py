"""The ``prefill`` workload: long prompts of standard-library source, timed to the first id.

* ``cold:1k`` ... ``cold:8k``: one request each of about 1k, 2k, 4k and 8k
  prompt ids (the largest trimmed to leave room for the output in the
  context), each a different stretch of source, sent to an empty cache: a
  system drops what it cached before every item that is not ``warm``, so
  every repeat is cold too.
* ``turn:N``: a code-review conversation that grows by about 1k ids of source
  a turn toward the context window. Every turn but the first is ``warm``: the
  system keeps what the previous turn left, whose prompt is this one's
  prefix, so its time to first token is the prompt cache at work. The
  assistant's turns in the history are fixed text, as in a recorded trace.
* ``agent:N``: the turns of `PrefillSizes.agent` (about 4k ids deep, 1k of
  them new) ask for a rewrite and take `agent_output` output ids: an agent's
  whole turn, timed end to end as well as to its first id.

No tools are offered, so a reply streams from its first id and the time to
first token is the prompt's (ffwd's parser holds back the opening of a tool
call until its name is known). Sizes are counted with the served tokenizer
(`count`, ids of a text without special tokens); the report gives the exact
prompt ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ffwd.bench.workloads.items import Item, module_path

MARKUP = 48  # ids the chat template adds around a single user message (and then some)
PER_MESSAGE = 8  # ids of the template's markup around each further message
REVIEW = ("You are reviewing a Python codebase, one file at a time. After each part, "
          "say in one sentence what it does.")


@dataclass(frozen=True, slots=True)
class PrefillSizes:
    cold: tuple[int, ...]  # prompt ids of the cold requests
    turn: int  # source ids each conversation turn adds
    turns: int  # at most this many turns (and no further than the context allows)
    max_tokens: int  # output ids of every request but an agent turn
    agent: tuple[int, ...] = ()  # the turns that are whole agent turns
    agent_output: int = 200  # their output ids


FULL = PrefillSizes(cold=(1024, 2048, 4096, 8192), turn=1024, turns=64, max_tokens=8,
                    agent=(4,))
QUICK = PrefillSizes(cold=(1024,), turn=256, turns=3, max_tokens=8)


def corpus(modules: Sequence[str]) -> list[str]:
    """The modules' source lines, one after another, each file under a comment naming it."""
    lines: list[str] = []
    for m in modules:
        lines.append(f"# file: {m.replace('.', '/')}.py\n")
        lines += module_path(m).read_text(encoding="utf-8").splitlines(keepends=True)
    return lines


def take(lines: Sequence[str], start: int, ids: int, count: Callable[[str], int],
         wrap: Callable[[str], str] = str) -> int:
    """The end of the longest run of `lines` from `start` whose text, as `wrap` puts it
    in a message, counts at most `ids`."""
    lo, hi = start, len(lines)
    while lo < hi:  # the largest end whose text fits (the count grows with the end)
        mid = (lo + hi + 1) // 2
        if count(wrap("".join(lines[start:mid]))) <= ids:
            lo = mid
        else:
            hi = mid - 1
    if lo == start:
        raise ValueError(f"no source left for {ids} ids from line {start} of {len(lines)}")
    return lo


def label(ids: int) -> str:
    """``1024`` -> ``'1k'``."""
    return f"{ids // 1024}k" if ids % 1024 == 0 else str(ids)


def _ask(code: str) -> str:
    return f"```python\n{code}```\n\nWhat does this code do? Answer in one sentence."


def _rewrite(code: str) -> str:
    return f"```python\n{code}```\n\nRewrite this code with a docstring on every function."


def cold_items(lines: Sequence[str], count: Callable[[str], int], budget: int,
               sizes: PrefillSizes) -> tuple[list[Item], int]:
    """One request per cold size, each on source after the last one's; and the next line."""
    out, start = [], 0
    for size in sizes.cold:
        end = take(lines, start, min(size, budget) - MARKUP, count, _ask)
        messages = [{"role": "user", "content": _ask("".join(lines[start:end]))}]
        out.append(Item("prefill", f"cold:{label(size)}", messages, sizes.max_tokens,
                        kind="cold"))
        start = end
    return out, start


def conversation(lines: Sequence[str], start: int, count: Callable[[str], int], budget: int,
                 sizes: PrefillSizes) -> list[Item]:
    """The review conversation from line `start`: one item per turn, while it fits."""
    history: list[dict[str, Any]] = [{"role": "system", "content": REVIEW}]
    used = count(REVIEW) + MARKUP
    out: list[Item] = []
    for turn in range(1, sizes.turns + 1):
        room = min(sizes.turn, budget - used - 2 * PER_MESSAGE)
        if room < sizes.turn // 2 or start >= len(lines):
            break
        agent = turn in sizes.agent
        wrap = _rewrite if agent else _ask
        end = take(lines, start, room, count, wrap)
        ask = {"role": "user", "content": wrap("".join(lines[start:end]))}
        out.append(Item("prefill", f"{'agent' if agent else 'turn'}:{turn}", [*history, ask],
                        sizes.agent_output if agent else sizes.max_tokens, kind="turn",
                        warm=turn > 1))
        reply = {"role": "assistant", "content": f"Part {turn} read."}
        history += [ask, reply]
        used += count(ask["content"]) + count(reply["content"]) + 2 * PER_MESSAGE
        start = end
    return out


def prefill_items(count: Callable[[str], int], context: int, *, quick: bool,
                  modules: Sequence[str]) -> list[Item]:
    """The cold requests, then the conversation's turns (see the module docstring);
    `context` is the systems' context window in ids."""
    sizes = QUICK if quick else FULL
    budget = context - max(sizes.max_tokens, sizes.agent_output if sizes.agent else 0)
    lines = corpus(modules)
    cold, start = cold_items(lines, count, budget, sizes)
    return cold + conversation(lines, start, count, budget, sizes)
