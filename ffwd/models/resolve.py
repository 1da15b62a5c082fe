"""What a user types for ``--model``, resolved to a model's files, every local place first.

In this order (docs/models.md), the first that holds the model serves it:

1. an alias: ``default``/``smollm2`` (the embedded SmolLM2-135M-Instruct), ``gemma3``;
2. a path: a GGUF (any part of a split names its first), a Hugging Face model
   directory, or a folder of GGUFs (the one Q4_K_M, Q8_0 or the first picks);
3. a Hub name ``ORG/NAME[:QUANT]`` in the local Hub cache (`hubcache`);
4. an Ollama name ``[NAMESPACE/]MODEL[:TAG]`` through its manifest (`ollama`);
5. an LM Studio ``PUBLISHER/REPO[:QUANT]`` or a file in it (`lmstudio`);
6. a Hub name downloaded into the Hub cache (`download`), unless offline
   (``--offline``, HF_HUB_OFFLINE=1): then the network is never reached.

When none does, `ModelNotFound` says, in one message, where ffwd looked and the
closest names it found in each place.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ffwd.config.places import ModelPlaces, resolve_model_places
from ffwd.models import hubcache, lmstudio, ollama
from ffwd.models.download import DownloadFailed, download
from ffwd.models.files import ALIASES, Found, ModelRef, embedded, gguf_ref
from ffwd.models.folders import hf_directory, in_folder
from ffwd.models.ggufmeta import gguf_meta
from ffwd.models.names import hub_name, ollama_name, split_name, split_of


class ModelNotFound(ValueError):
    """No place holds the model: the message names each place looked in (a `ValueError`,
    so every command reports it without a traceback)."""


def resolve_model(spec: str | os.PathLike[str], places: ModelPlaces | None = None) -> ModelRef:
    """The model `spec` names (module docstring); `places` default to the environment's."""
    raw = str(spec).strip()
    found = embedded(raw)
    if found is not None:
        return found
    places = places or resolve_model_places()
    looked: list[str] = []
    for look in (_path, _hub_cache, _ollama, _lmstudio, _download):
        try:
            found = look(raw, places, looked)
        except DownloadFailed as exc:
            looked.append(f"the Hub ({places.endpoint}): {exc}")
            found = None
        except ValueError as exc:  # a model there, incomplete: name it, look on
            looked.append(f"{exc}")
            found = None
        if found is not None:
            return found
    raise ModelNotFound(f"model {raw!r} was not found. ffwd looked in\n  "
                        + "\n  ".join(looked)
                        + f"\n(aliases: {', '.join(ALIASES)}; `ffwd models` lists what is here)")


def _path(raw: str, places: ModelPlaces, looked: list[str]) -> ModelRef | None:
    p = Path(raw).expanduser()
    if p.is_file():
        split = split_of(p.name)
        if split is not None and split[1] != 1:  # llama.cpp loads a split from its first
            p = p.with_name(split_name(split[0], 1, split[2]))
        gguf_meta(p)  # a ValueError when it is not a GGUF
        return gguf_ref(split[0] if split else p.stem, p)
    if p.is_dir():
        found = ModelRef(p.name, p) if hf_directory(p) else in_folder(p, p.name, None)
        if found is None:
            looked.append(f"the folder {p}: no config.json and no GGUF model file in it")
        return found
    looked.append(f"a path: no file or folder {p}")
    return None


def _hub_cache(raw: str, places: ModelPlaces, looked: list[str]) -> ModelRef | None:
    name = hub_name(raw)
    if name is None:
        looked.append(f"{hubcache.where(places)}: not a Hub name (ORG/NAME[:QUANT])")
        return None
    found = hubcache.find(places, name)
    if found is None:
        _missed(raw, hubcache.where(places), hubcache.listed(places), looked)
    return found


def _ollama(raw: str, places: ModelPlaces, looked: list[str]) -> ModelRef | None:
    name = ollama_name(raw)
    if name is None:
        looked.append(f"{ollama.where(places)}: not an Ollama name ([NAMESPACE/]MODEL[:TAG])")
        return None
    found = ollama.find(places, name)
    if found is None:
        _missed(str(name), ollama.where(places), ollama.listed(places), looked)
    return found


def _lmstudio(raw: str, places: ModelPlaces, looked: list[str]) -> ModelRef | None:
    if not lmstudio.is_name(raw):
        looked.append(f"{lmstudio.where(places)}: not an LM Studio name (PUBLISHER/REPO)")
        return None
    found = lmstudio.find(places, raw)
    if found is None:
        _missed(raw, lmstudio.where(places), lmstudio.listed(places), looked)
    return found


def _download(raw: str, places: ModelPlaces, looked: list[str]) -> ModelRef | None:
    name = hub_name(raw)
    if name is None:
        looked.append(f"the Hub ({places.endpoint}): not a Hub name, nothing to download")
    elif places.offline:
        looked.append(f"the Hub ({places.endpoint}): not asked, offline (--offline or "
                      "HF_HUB_OFFLINE=1)")
    else:
        return download(places, name)
    return None


def _missed(name: str, where: str, listed: list[Found], looked: list[str]) -> None:
    """Note that `where` has no `name`, with the closest names it holds."""
    near = closest(name, [f.name for f in listed])
    looked.append(f"{where}: no {name}" + (f"; closest there: {', '.join(near)}" if near
                                           else ""))


def closest(name: str, names: list[str], n: int = 3) -> list[str]:
    """Up to `n` of `names` nearest to `name`, in any case: those holding its model part
    first (the most alike first), then the most alike.

    >>> closest("qwen3:4b", ["llama3.2:1b", "qwen3:8b", "Qwen/Qwen3-8B-GGUF:Q4_K_M"])
    ['qwen3:8b', 'Qwen/Qwen3-8B-GGUF:Q4_K_M']
    """
    want = name.lower()
    lowered = {x.lower(): x for x in names}
    stem = want.partition(":")[0].rpartition("/")[2]
    holding = sorted((low for low in lowered if stem and stem in low),
                     key=lambda low: -difflib.SequenceMatcher(None, want, low).ratio())
    alike = difflib.get_close_matches(want, lowered, n, 0.5)
    return [lowered[low] for low in dict.fromkeys(holding + alike)][:n]
