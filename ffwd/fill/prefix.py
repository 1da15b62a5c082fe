"""The longest common prefix of two sequences: ids, strings, anything indexable.

Used wherever two runs are lined up: the prompt cache and the backend's cache
against a new prompt, the grammar matcher against the output it follows, and
template renderings against each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items `a` and `b` share.

    >>> common_prefix([1, 2, 3, 4], [1, 2, 9])
    2
    >>> common_prefix("<tool_call>", "<tool_response>")
    6
    """
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
