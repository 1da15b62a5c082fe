"""The Hugging Face Hub cache (`ffwd.config.places`), as huggingface_hub lays it out.

A repository ``ORG/NAME`` is ``models--ORG--NAME/``: ``refs/main`` holds the
commit its ``main`` is at, ``snapshots/COMMIT/`` the files (links into
``blobs/``), a download in progress a ``blobs/*.incomplete`` file and no link
yet. A Hub name serves the snapshot ``refs/main`` names (else the newest one):
the GGUF its tag picks there, or the snapshot itself as a Hugging Face model
directory (``vllm serve ORG/NAME``). Folder names are matched in any case, as
the Hub matches repository names.
"""

from __future__ import annotations

from pathlib import Path

from ffwd.config.places import ModelPlaces
from ffwd.models import folders
from ffwd.models.files import Found, ModelRef
from ffwd.models.folders import held, in_folder
from ffwd.models.names import HubName

PLACE = "Hub cache"


def where(places: ModelPlaces) -> str:
    return folders.where("the Hugging Face Hub cache", (places.hub_cache,))


def repo_folder(cache: Path, repo: str) -> Path | None:
    """The cache's folder of `repo`, in any case, or None."""
    want = "models--" + repo.replace("/", "--")
    if (cache / want).is_dir():
        return cache / want
    if not cache.is_dir():
        return None
    return next((d for d in sorted(cache.iterdir())
                 if d.name.lower() == want.lower() and d.is_dir()), None)


def snapshot(folder: Path) -> Path | None:
    """The snapshot ``refs/main`` names, else the newest, else None."""
    ref = folder / "refs" / "main"
    if ref.is_file():
        named = folder / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if named.is_dir():
            return named
    snaps = [d for d in (folder / "snapshots").glob("*") if d.is_dir()]
    return max(snaps, key=lambda d: d.stat().st_mtime) if snaps else None


def find(places: ModelPlaces, name: HubName) -> ModelRef | None:
    """The model `name` serves from the cache, or None; `ValueError` when the GGUF it
    names there misses a part of its split."""
    folder = repo_folder(places.hub_cache, name.repo)
    snap = snapshot(folder) if folder is not None else None
    return in_folder(snap, str(name), name.tag) if snap is not None else None


def listed(places: ModelPlaces) -> list[Found]:
    """Every model the cache holds, by the Hub name that serves it (a GGUF no tag names:
    by its path)."""
    cache = places.hub_cache
    out: list[Found] = []
    for folder in sorted(cache.glob("models--*--*")) if cache.is_dir() else ():
        snap = snapshot(folder)
        if snap is not None:
            repo = folder.name.removeprefix("models--").replace("--", "/", 1)
            out += held(snap, repo, PLACE, str(snap))  # untagged: by path
    return out
