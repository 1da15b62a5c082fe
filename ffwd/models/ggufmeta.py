"""A GGUF file's own metadata, read once from its header (never its tensors).

`gguf_meta(path)` reads the key-value header: the architecture, the context
length it was trained for, the quantization, its chat templates (the default
``tokenizer.chat_template`` and every named one, ``tokenizer.chat_template.NAME``,
which transformers' GGUF reader drops), its special ids and, for a split GGUF,
its part number and count. The vocabulary's arrays are stepped over, not
read: the header of a 262k-id vocabulary reads in a fraction of a second,
where `gguf.GGUFReader` parses every array and tensor (seconds). The result
is kept per file (path, size, modification time), so each file is read once
a process.

`split_parts(path)` lists every part of a split GGUF from its first (llama.cpp's
naming), and says which part is missing.
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ffwd.models.names import split_name, split_of

MAGIC = b"GGUF"
# value type -> struct format of its scalar (8: string, 9: array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
STRING, ARRAY = 8, 9
KEEP_ARRAY = 64  # string arrays up to this long are kept (template names, languages)
SPECIAL = ("bos", "eos", "eot", "eom", "padding", "unknown", "sep")


@dataclass(frozen=True, slots=True)
class GgufMeta:
    """What a GGUF's header says about the model (module docstring)."""

    values: dict[str, object] = field(repr=False)  # scalars, strings, short string arrays
    lengths: dict[str, int] = field(repr=False)  # every array's length

    @property
    def architecture(self) -> str:
        return str(self.values.get("general.architecture", ""))

    @property
    def context_length(self) -> int | None:
        value = self.values.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    @property
    def quantization(self) -> str | None:
        """The file type llama.cpp's quantizer wrote (``Q4_K_M``), None when unnamed."""
        from gguf import LlamaFileType

        value = self.values.get("general.file_type")
        try:
            return LlamaFileType(value).name.removeprefix("MOSTLY_") if isinstance(
                value, int) else None
        except ValueError:
            return None

    @property
    def templates(self) -> dict[str, str]:
        """Every chat template the file holds by name: ``default`` and the named ones."""
        prefix = "tokenizer.chat_template"
        out = {"default": v} if isinstance(v := self.values.get(prefix), str) else {}
        for key, value in self.values.items():
            if key.startswith(prefix + ".") and isinstance(value, str):
                out[key.removeprefix(prefix + ".")] = value
        return out

    @property
    def special_ids(self) -> dict[str, int]:
        """The special ids it names: bos, eos, eot, eom, padding, unknown, sep."""
        keys = {name: self.values.get(f"tokenizer.ggml.{name}_token_id") for name in SPECIAL}
        return {k: v for k, v in keys.items() if isinstance(v, int)}

    @property
    def vocab_size(self) -> int | None:
        return self.lengths.get("tokenizer.ggml.tokens")

    @property
    def split(self) -> tuple[int, int]:
        """(part number from 1, parts): (1, 1) for a file that is not split."""
        no, count = self.values.get("split.no", 0), self.values.get("split.count", 0)
        return (int(no) + 1, int(count)) if isinstance(no, int) and isinstance(
            count, int) and count > 1 else (1, 1)


def gguf_meta(path: str | Path) -> GgufMeta:
    """The header of the GGUF at `path` (`ValueError` when it is not one), read once."""
    p = Path(path)
    st = p.stat()
    return _read_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _read_cached(path: str, size: int, mtime_ns: int) -> GgufMeta:
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            return _header(buf)
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            raise ValueError(f"{path}: the GGUF header is cut short or damaged ({exc})") from None


def _header(buf: mmap.mmap) -> GgufMeta:
    if buf[:4] != MAGIC:
        raise ValueError("not a GGUF file (no GGUF magic)")
    version, _tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version < 2:
        raise ValueError(f"GGUF version {version}: only 2 and later are read")
    values: dict[str, object] = {}
    lengths: dict[str, int] = {}
    off = 24
    for _ in range(n_kv):
        key, off = _string(buf, off)
        (kind,), off = struct.unpack_from("<I", buf, off), off + 4
        if kind == ARRAY:
            (item, count), off = struct.unpack_from("<IQ", buf, off), off + 12
            lengths[key] = count
            if item == STRING and count <= KEEP_ARRAY:
                items = []
                for _ in range(count):
                    text, off = _string(buf, off)
                    items.append(text)
                values[key] = items
            else:
                off = _skip(buf, off, item, count)
        elif kind == STRING:
            values[key], off = _string(buf, off)
        else:
            fmt = "<" + _SCALARS[kind]
            (values[key],), off = struct.unpack_from(fmt, buf, off), off + struct.calcsize(fmt)
    return GgufMeta(values, lengths)


def _string(buf: mmap.mmap, off: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, off)
    end = off + 8 + n
    if end > len(buf):
        raise IndexError("a string runs past the end of the file")
    return buf[off + 8:end].decode("utf-8"), end


def _skip(buf: mmap.mmap, off: int, item: int, count: int) -> int:
    """The offset after an array of `count` values of type `item`."""
    if item == STRING:
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            off += 8 + unpack(buf, off)[0]
        return off
    if item == ARRAY:
        raise ValueError("nested arrays are not read")
    return off + count * struct.calcsize(_SCALARS[item])


def split_parts(path: Path) -> list[Path]:
    """Every part of the GGUF whose first part (or only file) is `path`; `ValueError`
    naming the first part that is missing, or when `path` is not a first part."""
    no, count = gguf_meta(path).split
    if count == 1:
        return [path]
    named = split_of(path.name)
    if no != 1 or named is None or named[1:] != (1, count):
        raise ValueError(f"{path}: part {no} of a {count}-part GGUF, not the first part named "
                         f"{split_name('NAME', 1, count)} that llama.cpp loads the rest from")
    parts = [path.with_name(split_name(named[0], i, count)) for i in range(1, count + 1)]
    missing = [p for p in parts if not p.is_file()]
    if missing:
        raise ValueError(f"{path}: part {parts.index(missing[0]) + 1} of {count} is missing "
                         f"({missing[0].name})")
    return parts
