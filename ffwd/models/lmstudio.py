"""LM Studio's models folder (`ffwd.config.places`): ``PUBLISHER/REPO/FILE.gguf``.

``publisher/repo`` (with an optional ``:QUANT``) serves the GGUF the tag picks
in that folder, as a Hub name does in a snapshot; ``publisher/repo/file.gguf``
serves that file.
"""

from __future__ import annotations

from ffwd.config.places import ModelPlaces
from ffwd.models import folders
from ffwd.models.files import Found, ModelRef, gguf_ref
from ffwd.models.folders import held, in_folder
from ffwd.models.names import hub_name

PLACE = "LM Studio"


def where(places: ModelPlaces) -> str:
    return folders.where("LM Studio", places.lmstudio)


def is_name(raw: str) -> bool:
    """Whether `raw` is an LM Studio name: ``publisher/repo[:QUANT]`` or a GGUF in one."""
    parts = raw.split("/")
    return hub_name(raw) is not None or (len(parts) >= 3 and raw.endswith(".gguf")
                                         and ".." not in parts and "" not in parts)


def find(places: ModelPlaces, raw: str) -> ModelRef | None:
    """The model `raw` names in a models folder, or None (`ValueError`: a part of its split
    is missing)."""
    name = hub_name(raw)
    for root in places.lmstudio:
        if name is not None:
            found = in_folder(root / name.repo, raw, name.tag)
            if found is not None:
                return found
        elif is_name(raw) and (root / raw).is_file():
            return gguf_ref(raw, root / raw)
    return None


def listed(places: ModelPlaces) -> list[Found]:
    """Every model the folders hold, by the name that serves it."""
    out: list[Found] = []
    for root in places.lmstudio:
        for folder in sorted(root.glob("*/*")) if root.is_dir() else ():
            if folder.is_dir():
                repo = folder.relative_to(root).as_posix()
                out += held(folder, repo, PLACE, repo)
    return out
