"""A Hub name no local place holds, downloaded into the Hub cache with huggingface_hub.

The repository's file list (the model-info API) says what to fetch: the GGUF
the tag picks (`ffwd.models.names.pick_gguf`) and the rest of its split, or,
for a Hugging Face model directory, its configuration, tokenizer and
safetensors files. Each file is fetched into the Hub cache at the repository's
``main`` (``hf_hub_download``: a progress bar on stderr; a file an interrupted
download left incomplete resumes where it stopped), and the model is then
served from the cache like any other there. Never called offline.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ffwd.config.places import ModelPlaces
from ffwd.models import hubcache
from ffwd.models.files import ModelRef
from ffwd.models.names import HubName, is_model_file, pick_gguf, split_name, split_of

log = logging.getLogger("ffwd.models")
# What a Hugging Face model directory needs: configuration, tokenizer, weights.
HF_FILES = (".json", ".safetensors", ".jinja", ".model", ".txt", ".tiktoken")


class DownloadFailed(ValueError):
    """The Hub did not give the model: why, in one line."""


def wanted(files: Sequence[str], name: HubName) -> list[str]:
    """The files of a repository holding `files` that serve `name`.

    >>> wanted(["a-Q8_0.gguf", "b-Q4_K_M-00001-of-00002.gguf", "b-Q4_K_M-00002-of-00002.gguf"],
    ...        HubName("o/r"))
    ['b-Q4_K_M-00001-of-00002.gguf', 'b-Q4_K_M-00002-of-00002.gguf']
    """
    found = pick_gguf(files, name.tag)
    if found is not None:
        split = split_of(found)
        return [split_name(split[0], i, split[2]) for i in range(1, split[2] + 1)] \
            if split else [found]
    if name.tag is None and "config.json" in files:
        return [f for f in files if f.endswith(HF_FILES) and "/" not in f]
    ggufs = [f for f in files if is_model_file(f)]
    want = f"GGUF tagged {name.tag}" if name.tag else "GGUF model file and no config.json"
    raise DownloadFailed(f"{name.repo} on the Hub has no {want} (its GGUF files: "
                         f"{', '.join(ggufs[:8]) or 'none'})")


def download(places: ModelPlaces, name: HubName) -> ModelRef:
    """`name` fetched into the Hub cache and served from there; `DownloadFailed` with the
    Hub's reason (no such repository, no such file, no connection)."""
    assert not places.offline, "offline: the Hub is never asked"
    from huggingface_hub import HfApi, hf_hub_download

    try:
        info = HfApi(endpoint=places.endpoint).model_info(name.repo)
        files = wanted([s.rfilename for s in info.siblings or ()], name)
        log.warning("downloading %s (%s) from %s into %s", name, ", ".join(files),
                    places.endpoint, places.hub_cache)
        for f in files:
            hf_hub_download(name.repo, f, cache_dir=places.hub_cache, endpoint=places.endpoint)
    except DownloadFailed:
        raise
    except Exception as exc:  # whatever stopped the download: the Hub's reason, in a line
        reason = " ".join(str(exc).split())[:300]
        raise DownloadFailed(f"{type(exc).__name__}: {reason}") from None
    found = hubcache.find(places, name)
    if found is None:
        raise DownloadFailed(f"downloaded, yet {name} is not in {places.hub_cache}")
    return found
