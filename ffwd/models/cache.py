"""The cache folder's entries (`ffwd.config.cache_dir()`): each one can be built again.

What ffwd keeps there: converted tokenizers and models (``tokenizers/``,
``models/``: `files`, `weights`), measured forward costs and attention tables
(``costs/``: `costs`), engine checks (``checks/``: `load`), the assembled
gemma3 GGUF (``gguf/``: `files`); llama.cpp's builds (``llama/``) belong to
``tools/llama_build.py``.

`read_cached(path, read, what)` is ``read(path)``, or None when nothing is
there or it cannot be read (truncated, not JSON, another version's layout,
wrong types inside): then one warning names the entry's path and what was
wrong, the entry is removed, and the caller builds it again. A damaged cache
never stops a start. Writers are atomic (`write_json`, `save_tree`): a crash
leaves the old entry or none, never half of one; an entry that cannot be
written is a warning (the next start builds it again), never a failure.

A converted tree carries `MANIFEST`: the size and SHA-256 of each of its files
and the transformers version that wrote it, which `check_tree` compares before
the tree is read, so that the warning names the damaged file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("ffwd.models")
T = TypeVar("T")
MANIFEST = "ffwd-manifest.json"
LAYOUT = 1  # the manifest's own layout


def read_cached(path: Path, read: Callable[[Path], T], what: str) -> T | None:
    """``read(path)``, or None: nothing at `path`, or (logged, removed) it cannot be read."""
    if not path.exists():
        return None
    try:
        return read(path)
    except Exception as exc:  # any failure to read a cache entry means: build it again
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        log.warning("%s cache entry %s cannot be read (%s): removed, building it again",
                    what, path, why[:300])
        discard(path)
        return None


def discard(path: Path) -> None:
    """Remove a cache entry, a file or a tree (what cannot be removed stays)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any, what: str) -> None:
    """`data` as JSON at `path`, atomically; a folder that cannot be written is a warning."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("%s cannot be cached at %s (%s): it is built again at the next start",
                    what, path, exc)


def save_tree(obj: Any, target: Path, what: str) -> bool:
    """``obj.save_pretrained`` into a temporary folder, its `MANIFEST` beside the files,
    then renamed to `target`; False (and a warning) where the folder cannot be written."""
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
        obj.save_pretrained(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest(tmp)), encoding="utf-8")
        discard(target)
        os.replace(tmp, target)
        return True
    except OSError as exc:
        log.warning("%s cannot be cached at %s (%s): it is built again at the next start",
                    what, target, exc)
        return False
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def manifest(tree: Path) -> dict[str, Any]:
    """The files under `tree` (sizes and SHA-256) and the transformers that wrote them."""
    files = {str(p.relative_to(tree)): {"bytes": p.stat().st_size, "sha256": _digest(p)}
             for p in sorted(tree.rglob("*")) if p.is_file() and p.name != MANIFEST}
    return {"layout": LAYOUT, "transformers": version("transformers"), "files": files}


def check_tree(tree: Path) -> Path:
    """`tree`, when its files are those its `MANIFEST` lists, as this transformers wrote
    them; else `ValueError` naming the first file that differs."""
    try:
        want = read_json(tree / MANIFEST)
    except FileNotFoundError:
        raise ValueError(f"no {MANIFEST} (written before ffwd kept one)") from None
    if not isinstance(want, dict) or want.get("layout") != LAYOUT:
        raise ValueError(f"{MANIFEST}: not a layout-{LAYOUT} manifest")
    if want.get("transformers") != version("transformers"):
        raise ValueError(f"written by transformers {want.get('transformers')}, "
                         f"this is {version('transformers')}")
    files = want.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError(f"{MANIFEST}: no files listed")
    for name, meta in files.items():
        p = tree / name
        if not p.is_file():
            raise ValueError(f"{p} is missing")
        size = p.stat().st_size
        if not isinstance(meta, dict) or size != meta.get("bytes"):
            raise ValueError(f"{p}: {size} bytes, written with {_bytes(meta)}")
        if _digest(p) != meta.get("sha256"):
            raise ValueError(f"{p}: its content changed since it was written")
    return tree


def _bytes(meta: object) -> object:
    return meta.get("bytes") if isinstance(meta, dict) else "?"


def _digest(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
