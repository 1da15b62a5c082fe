"""Text from token ids: the one incremental detokenizer, and each id's own text.

`Detokenizer` turns ids into text as they arrive, for the reply and for the
tool-call parser alike: decoding a short window from the last settled
boundary, so tokenizers whose pieces depend on their neighbours
(SentencePiece spaces, byte fallback) give exactly the text of the whole
sequence, and holding back an id that ends in the middle of a character.
Text is decoded as written (special tokens kept, no clean-up of spaces).

`TokenText` gives one id's own text and exact bytes, as the API's logprobs
report them: a token can end inside a UTF-8 character, so its text alone
cannot rebuild the output. Byte-level BPE vocabularies (GPT-2 style) spell
bytes as printable characters; SentencePiece ones spell raw bytes as ``<0xNN>``.
`token_text(tokenizer)` is one per tokenizer, its ids remembered across
requests. With a byte-level vocabulary the output's text is exactly the UTF-8
of its ids' bytes, so the `Detokenizer` given a `TokenText` reads each id's
bytes once and decodes them incrementally, without calling the tokenizer.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from functools import cache
from typing import Any


def decode_ids(tokenizer: Any, ids: Sequence[int]) -> str:
    """`ids` as text, exactly as written (special tokens kept, spaces not cleaned)."""
    return str(tokenizer.decode(list(ids), skip_special_tokens=False,
                                clean_up_tokenization_spaces=False))


class Detokenizer:
    """Token ids in, new text out (see the module docstring).

    >>> class Chars:  # a toy tokenizer: id i is chr(i); 0 is half a character
    ...     def decode(self, ids, **kw):
    ...         return "".join("\\ufffd" if i == 0 else chr(i) for i in ids)
    >>> d = Detokenizer(Chars())
    >>> d.feed([104, 105]), d.feed([0]), d.pending
    ('hi', '', True)
    """

    def __init__(self, tokenizer: Any, tokens: TokenText | None = None) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # window start
        self._read = 0  # ids already turned into text
        # A byte-level vocabulary: each id's bytes, decoded as they come.
        self._bytes = tokens if tokens is not None and tokens.byte_level else None
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    @property
    def pending(self) -> bool:
        """Whether some ids are held back (their text is not out yet)."""
        if self._bytes is not None:
            return bool(self._utf8.getstate()[0])
        return self._read < len(self.ids)

    def feed(self, ids: Sequence[int]) -> str:
        """The text that `ids` complete (held back while it ends mid-character)."""
        self.ids.extend(ids)
        if self._bytes is not None:
            return self._utf8.decode(b"".join(self._bytes(i)[1] for i in ids))
        return self._release(final=False)

    def flush(self) -> str:
        """Whatever is held back, at the end of the output."""
        if self._bytes is not None:
            return self._utf8.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        window = self.ids[self._prefix :]
        done = decode_ids(self.tokenizer, self.ids[self._prefix : self._read]) \
            if self._read > self._prefix else ""
        full = decode_ids(self.tokenizer, window) if window else ""
        if len(full) <= len(done) or (full.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return full[len(done) :]


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


@cache
def token_text(tokenizer: Any) -> TokenText:
    """The one `TokenText` of `tokenizer` (its ids' texts remembered across requests)."""
    return TokenText(tokenizer)


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
        return decode_ids(self.tokenizer, [token_id]).encode()
