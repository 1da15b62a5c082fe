"""Text from ids as they stream: incremental detokenizing and stop strings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Detokenizer:
    """Incremental decoding: each id's text, without re-decoding the whole output.

    Decodes a short window (from the last settled boundary) twice per id and
    releases the new text once it no longer ends in an incomplete character.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        return self._release(final=False)

    def flush(self) -> str:
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        before = self._decode(self.ids[self._prefix : self._read])
        now = self._decode(self.ids[self._prefix :])
        if len(now) > len(before) and (final or not now.endswith("\ufffd")):
            self._prefix, self._read = self._read, len(self.ids)
            return now[len(before) :]
        return ""


class StopMatcher:
    """Finds stop strings in streamed text, holding back what could start one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""

    def feed(self, delta: str) -> tuple[str, bool]:
        """Text safe to release and whether a stop string matched (text ends before it)."""
        if not self.stops:
            return delta, False
        buf = self._pending + delta
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self._pending = ""
            return buf[: min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self._pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out
