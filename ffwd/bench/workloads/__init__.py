"""The prompts `ffwd bench` runs: tool calls, copy-heavy code edits, open prose.

``select(workloads, limit, seed, bfcl, quick) -> list[Item]`` builds every
item from data on this machine (nothing is fetched), the same for the same
arguments and Python installation:

* ``tools/required``, ``tools/auto``: the first `limit` entries of each BFCL
  category, chat-templated with their tools. Each asks for one call
  (``parallel_tool_calls=false``): a system stops once its output parses as a
  complete call.
* ``echo``: `limit` edits and `limit` re-quotes of functions drawn with
  `seed` from Python standard-library modules. An edit asks for the whole
  function back with a small change (rename a parameter, rewrite the
  docstring, change a constant); a re-quote is an agent turn where a tool
  returned the source and the user asks to see it exactly.
* ``prose``: open-ended questions with nothing to copy (overhead).
* ``agent``: `limit` multi-turn coding-agent conversations (four requests
  each: read a file, edit a function, write it back, close the ticket), over
  tasks that recur across conversations (`ffwd.bench.workloads.agent`).
* ``repeat``: `limit` groups of repeated work, each pair's second request after
  its first: the same request again, a file re-read and re-written with another
  small change, a tool call again with one argument changed
  (`ffwd.bench.workloads.repeat`).
* ``prefill``: cold prompts of about 1k to 8k ids of standard-library source,
  and a conversation that grows toward the context window, timed to the first
  id (`ffwd.bench.workloads.prefill`; `limit` does not apply).
* ``contention``: no items; one ffwd system's decode speed alone and beside
  other processes (`ffwd.bench.contention`).
* ``concurrency``: no items here; 1, 2, 4 and 8 clients at once on a mix of
  short and long requests, ffwd serve --parallel N beside llama-server -np N
  (`ffwd.bench.concurrency`).
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ffwd.bench.workloads.agent import agent_items
from ffwd.bench.workloads.items import Function, Item, functions
from ffwd.bench.workloads.prefill import prefill_items
from ffwd.bench.workloads.repeat import repeat_items

WORKLOADS = ("tools", "echo", "prose", "agent", "repeat", "prefill", "contention",
             "concurrency")
# --quick's "all": the decode workloads, each read by the main table (a first look in a
# few minutes; prefill, contention and concurrency run when named)
QUICK_WORKLOADS = ("tools", "echo", "prose", "agent", "repeat")
TOOL_CHOICES = ("required", "auto")
DEFAULT_BFCL = ("simple_python", "multiple")

ECHO_MODULES = (
    "textwrap", "string", "json.decoder", "json.encoder", "shlex", "fnmatch", "difflib",
    "heapq", "bisect", "colorsys", "html", "base64", "calendar", "statistics",
    "gettext", "glob", "tokenize", "ipaddress", "csv",
)

PROSE_QUESTIONS = (
    "Why do leaves change colour in autumn?",
    "What makes a good night's sleep, and why does it matter?",
    "Describe how a city could reduce traffic without building new roads.",
    "Why is the sky blue during the day and red at sunset?",
    "What would you pack for a week-long hiking trip, and why?",
    "Explain to a child how airplanes stay in the air.",
    "What are the pros and cons of working from home?",
    "How do bees decide where to build a new hive?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What habits help people learn a new language faster?",
    "Why do some bridges sway in strong wind?",
    "Describe a perfect Sunday morning.",
    "How did the invention of the printing press change Europe?",
    "What should someone consider before adopting a dog?",
    "Why do we have seasons on Earth?",
    "Give advice to a student starting university.",
)


# --- tools --------------------------------------------------------------------


def tool_items(categories: tuple[str, ...], limit: int, max_tokens: int) -> list[Item]:
    """Each category's first `limit` BFCL entries, once per tool choice."""
    from ffwd.bench.workloads.bfcl import load_entries

    out = []
    for choice in TOOL_CHOICES:
        for category in categories:
            for e in load_entries(category, limit):
                out.append(Item(
                    f"tools/{choice}", e.id, e.messages, max_tokens, e.tools, choice,
                    single_call=True, kind=category,
                ))
    return out


# --- echo -----------------------------------------------------------------------


def edit_instruction(fn: Function, rng: random.Random) -> str:
    """A small change to ask for: rename a parameter, rewrite the docstring, change a constant."""
    options = []
    params = [a.arg for a in fn.node.args.args if a.arg not in ("self", "cls") and len(a.arg) > 1]
    used = {n.id for n in ast.walk(fn.node) if isinstance(n, ast.Name)}
    renamable = [p for p in params if p in used]
    if renamable:
        old = rng.choice(renamable)
        options.append(f"Rename the parameter `{old}` to `{old}_value` everywhere in it.")
    if ast.get_docstring(fn.node) is not None:
        options.append("Replace its docstring with a one-line summary.")
    else:
        options.append("Add a one-line docstring that says what it returns.")
    numbers = [
        n.value for n in ast.walk(fn.node)
        if isinstance(n, ast.Constant) and type(n.value) is int and n.value > 1
    ]
    if numbers:
        value = rng.choice(numbers)
        options.append(f"Change the constant {value} to {value * 2}.")
    return rng.choice(options)


def edit_item(fn: Function, rng: random.Random, max_tokens: int) -> Item:
    # Code first, then the request: the embedded 135M model copies far more
    # faithfully with this layout than with the request first.
    user = f"```python\n{fn.source}```\n\n{edit_instruction(fn, rng)} Write out the whole function."
    return Item("echo", f"edit:{fn.module}.{fn.name}", [{"role": "user", "content": user}],
                max_tokens, kind="edit")


READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read_source",
        "description": "Return the source code of a Python function.",
        "parameters": {
            "type": "object",
            "properties": {
                "module": {"type": "string", "description": "dotted module name"},
                "function": {"type": "string", "description": "function name"},
            },
            "required": ["module", "function"],
        },
    },
}


def requote_item(fn: Function, max_tokens: int) -> Item:
    """An agent turn: a tool returned the source, and the user wants it quoted back."""
    args = {"module": fn.module, "function": fn.name}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"Show me the source of `{fn.module}.{fn.name}`."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "read_source", "arguments": json.dumps(args)},
        }]},
        {"role": "tool", "tool_call_id": "call_0", "content": fn.source},
        {"role": "user", "content": "Quote that code back to me exactly, in a ```python block."},
    ]
    return Item(
        "echo", f"requote:{fn.module}.{fn.name}", messages, max_tokens,
        [READ_TOOL], "auto", kind="requote",
    )


def echo_items(limit: int, seed: int, *, max_chars: int, cap: int) -> list[Item]:
    """`limit` edits and `limit` re-quotes, alternating, on functions drawn with `seed`."""
    rng = random.Random(seed)
    pool = [f for m in ECHO_MODULES for f in functions(m, 200, max_chars)]
    picked = rng.sample(pool, min(2 * limit, len(pool)))
    out = []
    for i, fn in enumerate(picked):
        # About one token per 3.5 characters of code, plus room for a sentence.
        budget = min(cap, len(fn.source) * 2 // 7 + 48)
        out.append(edit_item(fn, rng, budget) if i % 2 == 0 else requote_item(fn, budget))
    return out


# --- prose ----------------------------------------------------------------------


def prose_items(limit: int, seed: int, max_tokens: int) -> list[Item]:
    rng = random.Random(seed)
    questions = rng.sample(PROSE_QUESTIONS, min(limit, len(PROSE_QUESTIONS)))
    return [
        Item("prose", f"prose:{i}", [{"role": "user", "content": q}], max_tokens)
        for i, q in enumerate(questions)
    ]


# --- selection ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sizes:
    """Output budgets; `--quick` uses smaller ones."""

    tools: int
    echo_chars: int  # longest function source taken for echo
    echo_cap: int
    prose: int


FULL = Sizes(tools=128, echo_chars=1600, echo_cap=448, prose=128)
QUICK = Sizes(tools=64, echo_chars=700, echo_cap=192, prose=64)


def select(
    workloads: tuple[str, ...],
    limit: int,
    seed: int = 0,
    bfcl: tuple[str, ...] = DEFAULT_BFCL,
    quick: bool = False,
    *,
    count: Callable[[str], int] | None = None,
    context: int = 8192,
) -> list[Item]:
    """All items of `workloads` (see the module docstring); ``prefill`` sizes its
    prompts with `count` (the served tokenizer's ids of a text) to fit `context`."""
    sizes = QUICK if quick else FULL
    out: list[Item] = []
    if "tools" in workloads:
        out += tool_items(bfcl, limit, sizes.tools)
    if "echo" in workloads:
        out += echo_items(limit, seed, max_chars=sizes.echo_chars, cap=sizes.echo_cap)
    if "prose" in workloads:
        out += prose_items(limit, seed, sizes.prose)
    if "agent" in workloads:
        out += agent_items(limit, seed, max_chars=sizes.echo_chars, cap=sizes.echo_cap,
                           modules=ECHO_MODULES)
    if "repeat" in workloads:
        out += repeat_items(limit, seed, max_chars=sizes.echo_chars, cap=sizes.echo_cap,
                            modules=ECHO_MODULES)
    if "prefill" in workloads:
        if count is None:
            raise ValueError("the prefill workload needs the tokenizer's count")
        out += prefill_items(count, context, quick=quick, modules=ECHO_MODULES)
    return out


CONTENTION_TOKENS = 200  # as the issue that asked for the row timed `ffwd generate`


def contention_item(seed: int, quick: bool = False) -> Item:
    """The request the contention row times: a prose question, 200 output ids at most
    (--quick: the prose budget)."""
    item = prose_items(1, seed, QUICK.prose if quick else CONTENTION_TOKENS)[0]
    return Item("contention", item.id, item.messages, item.max_tokens)
