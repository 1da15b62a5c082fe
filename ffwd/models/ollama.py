"""Ollama's models folder (`ffwd.config.places`): a manifest per name, GGUF blobs.

``ollama pull qwen3:8b`` writes ``manifests/registry.ollama.ai/library/qwen3/8b``,
a JSON image manifest whose layer of media type
``application/vnd.ollama.image.model`` names the model's blob by digest
(``sha256:HEX``), kept as ``blobs/sha256-HEX``: a GGUF file, served as it is.
Ollama's own template layer is Go, not Jinja: ffwd reads the GGUF's own chat
template instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from ffwd.config.places import ModelPlaces
from ffwd.models import folders
from ffwd.models.files import Found, ModelRef, gguf_ref
from ffwd.models.names import OllamaName

PLACE = "Ollama"
MODEL_LAYER = "application/vnd.ollama.image.model"


def where(places: ModelPlaces) -> str:
    return folders.where("Ollama", places.ollama)


def find(places: ModelPlaces, name: OllamaName) -> ModelRef | None:
    """The model `name`'s manifest names, or None; `ValueError` when its manifest has no
    model layer or the blob is missing."""
    for root in places.ollama:
        manifest = root.joinpath("manifests", *name.parts)
        if manifest.is_file():
            return gguf_ref(str(name), model_blob(root, manifest))
    return None


def model_blob(root: Path, manifest: Path) -> Path:
    """The model blob `manifest` names under `root`."""
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
        digest = next(layer["digest"] for layer in layers
                      if layer.get("mediaType") == MODEL_LAYER)
    except (ValueError, AttributeError, TypeError, KeyError, StopIteration):
        raise ValueError(f"{manifest}: an Ollama manifest without a model layer") from None
    blob = root / "blobs" / str(digest).replace(":", "-", 1)
    if not blob.is_file():
        raise ValueError(f"{manifest} names the blob {blob}, which is missing (ollama pull "
                         "it again)")
    return blob


def listed(places: ModelPlaces) -> list[Found]:
    """Every model an Ollama manifest names (manifests it cannot read are left out)."""
    out: list[Found] = []
    for root in places.ollama:
        for manifest in sorted((root / "manifests").glob("*/*/*/*")):
            name = OllamaName(*manifest.relative_to(root / "manifests").parts)
            try:
                out.append(Found(str(name), PLACE, gguf_ref(str(name),
                                                            model_blob(root, manifest))))
            except (ValueError, OSError):
                continue
    return out
