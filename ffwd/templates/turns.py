"""Where an assistant turn starts in a rendering that includes it.

A conversation rendered with a generation prompt ends where the model's turn
begins; rendered with that turn written out, it usually starts the same way.
Not always: a reasoning template's generation prompt opens a block
(``<think>``) that a written turn shows closed, or not at all. The turn then
starts where the two renderings part, backed off to the start of the markup
they part in (``<think>`` and ``</think>`` share their ``<``): what the
model writes after the prompt is what the written turn shows from there, its
reasoning aside.

>>> turn_start("<a><think>", "<a></think>x"), turn_start("<a>", "<a>x")
(3, 3)
"""

from __future__ import annotations

MARKUP_STARTS = "<["


def turn_start(prompt: str, full: str) -> int:
    """The character of `full` at which the assistant turn after `prompt` starts."""
    if full.startswith(prompt):
        return len(prompt)
    n = 0
    while n < min(len(prompt), len(full)) and prompt[n] == full[n]:
        n += 1
    cut = max(prompt.rfind(c, 0, n + 1) for c in MARKUP_STARTS)
    shared = prompt[cut:n]
    return cut if cut >= 0 and not any(c.isspace() for c in shared) else n
