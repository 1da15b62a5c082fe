"""A folder of model files (a Hub snapshot, an LM Studio repository, a path typed):
which model a quantization tag names in it, and every model it holds.

A folder with GGUF model files serves the one `ffwd.models.names.pick_gguf`
picks; without a tag, a folder with ``config.json`` (and no GGUF) is a
Hugging Face model directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ffwd.models.files import Found, ModelRef, gguf_ref
from ffwd.models.names import is_model_file, pick_gguf, split_of, tag_of


def where(label: str, folders: Sequence[Path]) -> str:
    """`label` and its folders, for a message (``absent`` after one that does not exist)."""
    return f"{label} (" + ", ".join(
        f"{f}" if f.is_dir() else f"{f}: absent" for f in folders) + ")"


def gguf_files(folder: Path) -> list[str]:
    """The GGUF model files under `folder` (subfolders too), as sorted relative paths."""
    return sorted(str(p.relative_to(folder).as_posix()) for p in folder.rglob("*.gguf")
                  if is_model_file(p.name) and p.is_file())


def hf_directory(folder: Path) -> bool:
    return (folder / "config.json").is_file() or (folder / "tokenizer_config.json").is_file()


def in_folder(folder: Path, name: str, tag: str | None) -> ModelRef | None:
    """The model `tag` names in `folder`, served as `name`, or None; `ValueError` when the
    GGUF it names misses a part of its split."""
    if not folder.is_dir():
        return None
    found = pick_gguf(gguf_files(folder), tag)
    if found is not None:
        return gguf_ref(name, folder / found)
    return ModelRef(name, folder) if tag is None and hf_directory(folder) else None


def held(folder: Path, prefix: str, place: str, untagged: str) -> list[Found]:
    """Every model in `folder`: each GGUF (the first of a split) as ``PREFIX:TAG`` where a
    tag names it (else ``UNTAGGED/relative path``), or the folder as `prefix` when it is
    a Hugging Face model directory; a split with a part missing is left out."""
    files = gguf_files(folder)
    out: list[Found] = []
    for rel in files:
        split = split_of(rel)
        if split is not None and split[1] != 1:
            continue
        tag = tag_of(files, rel)
        name = f"{prefix}:{tag}" if tag else f"{untagged}/{rel}"
        try:
            out.append(Found(name, place, gguf_ref(name, folder / rel)))
        except ValueError:  # not a GGUF after all, or an incomplete split
            continue
    if not files and hf_directory(folder):
        out.append(Found(prefix, place, ModelRef(prefix, folder)))
    return out
