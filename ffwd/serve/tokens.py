"""One token's text and bytes, as the logprobs of the API report them.

A token can end in the middle of a UTF-8 character, so its text alone cannot
rebuild the output; the API carries its exact `bytes` next to a readable
`token` (the bytes decoded, an incomplete character shown as U+FFFD).
Byte-level BPE vocabularies (GPT-2 style) spell bytes as printable
characters; SentencePiece ones spell raw bytes as ``<0xNN>``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from ffwd.engine.generate import TokenLogprob as EngineLogprob
from ffwd.serve.events import TokenLogprob, TopLogprob

_HEX_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable character table, inverted (character -> byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class TokenText:
    """Token id -> (text, bytes) for one tokenizer, remembered per id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.byte_level = "ByteLevel" in repr(getattr(backend, "decoder", ""))
        self._seen: dict[int, tuple[str, bytes]] = {}

    def __call__(self, token_id: int) -> tuple[str, bytes]:
        hit = self._seen.get(token_id)
        if hit is None:
            raw = self._bytes(token_id)
            hit = self._seen[token_id] = (raw.decode("utf-8", errors="replace"), raw)
        return hit

    def _bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if isinstance(piece, str):
            table = _byte_decoder()
            if self.byte_level and all(c in table for c in piece):
                return bytes(table[c] for c in piece)
            m = _HEX_BYTE.fullmatch(piece)
            if m is not None:
                return bytes([int(m.group(1), 16)])
        return str(self.tokenizer.decode([token_id], skip_special_tokens=False)).encode()

    def logprob(self, token_id: int, lp: EngineLogprob) -> TokenLogprob:
        """The API's view of one token's `EngineLogprob`."""
        text, raw = self(token_id)
        top = tuple(TopLogprob(*self._pair(i), _finite(v)) for i, v in lp.top)
        return TokenLogprob(text, tuple(raw), _finite(lp.logprob), top)

    def _pair(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        text, raw = self(token_id)
        return text, tuple(raw)


def _finite(x: float) -> float:
    """JSON has no -Infinity: an impossible token reports -9999 (as OpenAI does)."""
    return x if x > -9999.0 else -9999.0
