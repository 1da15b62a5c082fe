"""How a chat template writes a model's reasoning, read off its own rendering.

`reasoning_markup(template, tokenizer=None)` renders a user turn and an
assistant turn carrying reasoning (``reasoning_content``, which
`ffwd.templates.messages` also gives as ``reasoning`` and ``thinking``) with
thinking switched on, and cuts the markup around the reasoning out of what the
turn added: the text before it is `start` (``<think>``), the text between it
and the answer `end` (``</think>``), and what follows `end` before the answer
on every rendering is `resume`: markup that opens the answer (harmony's
``<|start|>assistant<|channel|>final<|message|>``), not content. A template
that reads reasoning but does not render it (DeepSeek R1 drops it) is read by
the tags it names (`TAGS`). None: the model does not reason.

`opens(markup, prompt)` says whether a rendered prompt ends inside a
reasoning block (Qwen3.5 and DeepSeek R1 open it in the generation prompt),
so the reply starts as reasoning. `thinking_variables(template, on, effort)`
are the variables a template reads to switch reasoning on or off and to set
its effort (``enable_thinking``, ``thinking``, ``reasoning_effort``), only
those the template names.

>>> qwen = ("{% for m in messages %}<|{{ m.role }}|>{% if m.reasoning_content %}"
...         "<think>\\n{{ m.reasoning_content }}\\n</think>\\n\\n{% endif %}"
...         "{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|>"
...         "{% endif %}")
>>> reasoning_markup(qwen)
ReasoningMarkup(start='<think>', end='</think>', resume='', how='rendered')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ffwd.templates.render import render_chat
from ffwd.templates.turns import turn_start

THOUGHT, ANSWER = "Let me think it over first.", "The answer is here."
USER = {"role": "user", "content": "What is the answer?"}
SWITCHES = {"enable_thinking": True, "thinking": True, "reasoning_effort": "high"}
# Reasoning tags as templates name them, for templates that drop the reasoning they read.
TAGS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"), ("<seed:think>", "</seed:think>"),
        ("<|channel>thought", "<channel|>"), ("<|START_THINKING|>", "<|END_THINKING|>"))
MARKUP_STARTS = "<["


@dataclass(frozen=True)
class ReasoningMarkup:
    """Where a reply's reasoning starts and ends (module docstring); `how` it was found:
    ``rendered`` (from the template's rendering) or ``named`` (from the tags it names)."""

    start: str
    end: str
    resume: str = ""
    how: str = "rendered"


def reasoning_markup(template: str, tokenizer: Any = None) -> ReasoningMarkup | None:
    """The reasoning markup `template` writes (module docstring), or None."""
    try:
        prompt = render_chat(template, [USER], None, True, tokenizer, **SWITCHES)
        full = render_chat(template, [USER, {"role": "assistant", "reasoning_content": THOUGHT,
                           "content": ANSWER}], None, False, tokenizer, **SWITCHES)
        called = _turn(template, prompt, {"content": None, "tool_calls": [_CALL]}, tokenizer)
    except ValueError:
        return _named(template)
    cut = _cut(full[turn_start(prompt, full):], prompt, full) if THOUGHT in full else None
    if cut is None:
        return _named(template)
    start, gap = cut
    end, resume = _split_end(gap, called)
    return ReasoningMarkup(start, end, resume) if end else _named(template)


_CALL = {"id": "call0", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def _turn(template: str, prompt: str, fields: dict[str, Any], tokenizer: Any) -> str:
    """The assistant turn with `THOUGHT` and `fields`, from where the reply starts (the
    conversation's whole text when the prompt ends inside the reasoning block)."""
    message = {"role": "assistant", "reasoning_content": THOUGHT, **fields}
    full = render_chat(template, [USER, message], None, False, tokenizer, **SWITCHES)
    return full[turn_start(prompt, full):] if THOUGHT in full else ""


def _cut(turn: str, prompt: str, full: str) -> tuple[str, str] | None:
    """The start markup before `THOUGHT` in the reply's `turn`, and the text between the
    reasoning and the answer. Where the turn shows none (the generation prompt opened the
    block), the start is the prompt's last markup, unless that closes a block (the prompt
    switched reasoning off), then the last markup before `THOUGHT` in `full`."""
    i, j = turn.find(THOUGHT), turn.find(ANSWER)
    if i < 0 or j < i:
        return None
    gap = turn[i + len(THOUGHT): j]
    start = turn[:i].strip() or _last_markup(prompt)
    if not start or start == gap.strip()[: len(start)]:
        start = _last_markup(full[: full.find(THOUGHT)])
    return (start, gap) if start else None


def _last_markup(text: str) -> str:
    text = text.rstrip()
    at = max(text.rfind(c) for c in MARKUP_STARTS)
    return text[at:] if at >= 0 else ""


def _split_end(gap: str, called: str) -> tuple[str, str]:
    """`end` and `resume` out of the text between reasoning and answer (`gap`): `end` is
    what the turn with a call also writes after the reasoning, up to its first markup that
    differs, and `resume` the rest (answer markup)."""
    gap = gap.strip()
    i = called.find(THOUGHT)
    if i < 0:
        return gap, ""
    after = called[i + len(THOUGHT):].lstrip()
    n = 0
    while n < min(len(gap), len(after)) and gap[n] == after[n]:
        n += 1
    if n == len(gap):
        return gap, ""
    # back off to the start of the markup the two part in (harmony: `<|start|>`)
    at = max(gap.rfind(c, 0, n + 1) for c in MARKUP_STARTS)
    cut = at if at > 0 else n
    return gap[:cut].strip(), gap[cut:].strip()


def _named(template: str) -> ReasoningMarkup | None:
    for start, end in TAGS:
        if start in template and end in template:
            return ReasoningMarkup(start, end, how="named")
    return None


def opens(markup: ReasoningMarkup, prompt: str) -> bool:
    """Whether `prompt` ends inside a reasoning block: the reply starts as reasoning."""
    return prompt.rstrip().endswith(markup.start)


# Efforts as the templates name them (low, medium, high), from the APIs' wider range.
EFFORTS = {"none": "low", "minimal": "low", "xhigh": "high", "max": "high"}
_VARIABLE = re.compile(r"\b(enable_thinking|thinking|reasoning_effort)\b")


def thinking_variables(template: str, on: bool | None, effort: str | None) -> dict[str, Any]:
    """The variables `template` reads to switch reasoning `on` (None: its default) and set
    its `effort` (module docstring)."""
    named = set(_VARIABLE.findall(template))
    out: dict[str, Any] = {}
    if on is not None:
        out.update({k: on for k in ("enable_thinking", "thinking") if k in named})
    if effort is not None and "reasoning_effort" in named:
        out["reasoning_effort"] = EFFORTS.get(effort, effort)
    return out
