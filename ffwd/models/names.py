"""What users type for a model, read as text: Hub names, Ollama names, GGUF file choice.

* `hub_name`: ``ORG/NAME[:QUANT]`` as llama-server's ``-hf`` takes it, the
  quantization tag optional (``hf.co/ORG/NAME:QUANT`` is how Ollama names a
  model it pulled from the Hub: an Ollama name).
* `ollama_name`: ``[HOST/][NAMESPACE/]MODEL[:TAG]`` as ``ollama run`` takes it
  (registry.ollama.ai, library and latest when left out).
* `pick_gguf`: the GGUF a quantization tag names among a repository's files, by
  llama-server's rule: the first model file whose path holds ``TAG-`` or ``TAG.``
  (any case), or without a tag Q4_K_M, then Q8_0, then the first; never a
  projector or imatrix file, only the first part of a split. One change: a
  tag that starts a word is looked for first, so ``:F16`` picks ``M-F16.gguf``
  over an earlier ``M-BF16.gguf`` (llama-server takes whichever comes first).
* `split_of` and `split_name`: llama.cpp's naming of split GGUFs,
  ``PREFIX-00001-of-00003.gguf``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_PART = r"\w(?:[\w.-]{0,94}\w)?"  # a Hub id's owner or name, an Ollama name's word
_WORD = re.compile(_PART, re.ASCII)
_TAG = re.compile(r"[A-Za-z0-9][\w.-]{0,127}", re.ASCII)
_HUB = re.compile(rf"(?P<repo>{_PART}/{_PART})(?::(?P<tag>{_TAG.pattern}))?", re.ASCII)
_HOST = re.compile(r"[\w.-]+(?::\d+)?", re.ASCII)
_SPLIT = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
OLLAMA_REGISTRY = "registry.ollama.ai"


@dataclass(frozen=True, slots=True)
class HubName:
    """A Hub repository and the quantization tag asked of it (None: the default)."""

    repo: str
    tag: str | None = None

    def __str__(self) -> str:
        return self.repo + (f":{self.tag}" if self.tag else "")


@dataclass(frozen=True, slots=True)
class OllamaName:
    """A model as Ollama files it: ``manifests/HOST/NAMESPACE/MODEL/TAG``."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def parts(self) -> tuple[str, str, str, str]:
        return self.host, self.namespace, self.model, self.tag

    def __str__(self) -> str:
        """The short name Ollama shows: no default registry, no ``library/``."""
        if self.host != OLLAMA_REGISTRY:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        lead = "" if self.namespace == "library" else f"{self.namespace}/"
        return f"{lead}{self.model}:{self.tag}"


def hub_name(text: str) -> HubName | None:
    """`text` as a Hub name, or None when it is not one.

    >>> hub_name("unsloth/Qwen3-8B-GGUF:q4_k_m")
    HubName(repo='unsloth/Qwen3-8B-GGUF', tag='q4_k_m')
    >>> hub_name("qwen3:8b") is None, hub_name("a/b/c") is None
    (True, True)
    """
    m = _HUB.fullmatch(text.strip())
    if m is None or any(bad in m["repo"] for bad in ("--", "..")):
        return None
    return HubName(m["repo"], m["tag"])


def ollama_name(text: str) -> OllamaName | None:
    """`text` as an Ollama name, or None when it is not one.

    >>> str(ollama_name("library/qwen3:8b")), ollama_name("qwen3").tag
    ('qwen3:8b', 'latest')
    """
    *lead, last = text.strip().split("/")
    model, colon, tag = last.partition(":")
    if len(lead) > 2 or (colon and not _TAG.fullmatch(tag)):
        return None
    host = lead[0] if len(lead) == 2 else OLLAMA_REGISTRY
    namespace = lead[-1] if lead else "library"
    if not _HOST.fullmatch(host) or not all(_WORD.fullmatch(w) for w in (namespace, model)):
        return None
    return OllamaName(host, namespace, model, tag or "latest")


def split_of(path: str) -> tuple[str, int, int] | None:
    """(prefix, part number from 1, parts) of a split GGUF's file name, else None.

    >>> split_of("q/M-Q4_K_M-00002-of-00003.gguf")
    ('q/M-Q4_K_M', 2, 3)
    """
    m = _SPLIT.fullmatch(path)
    return (m["prefix"], int(m["no"]), int(m["count"])) if m else None


def split_name(prefix: str, no: int, count: int) -> str:
    """The name of part `no` (from 1) of `count` (llama.cpp's ``llama_split_path``)."""
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"


def is_model_file(path: str) -> bool:
    """A GGUF that holds a model (not a projector, an imatrix or a draft head)."""
    name = path.rpartition("/")[2]
    return name.endswith(".gguf") and not any(bad in name for bad in NOT_MODELS)


def _first_part(path: str) -> bool:
    split = split_of(path)
    return split is None or split[1] == 1


def pick_gguf(files: Sequence[str], tag: str | None) -> str | None:
    """The model file `tag` names among `files` (module docstring), or None.

    >>> pick_gguf(["m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-F16.gguf"], None)
    'm-Q4_K_M.gguf'
    >>> pick_gguf(["m-Q8_0.gguf", "m-Q4_K_M.gguf"], "q8_0"), pick_gguf(["m-Q8_0.gguf"], "F16")
    ('m-Q8_0.gguf', None)
    """
    models = [f for f in files if is_model_file(f) and _first_part(f)]
    for t in (tag,) if tag else DEFAULT_TAGS:
        for lead in (r"(?:^|[-._/])", ""):  # a whole word first: F16 is not BF16's tail
            pattern = re.compile(lead + re.escape(t) + "[.-]", re.IGNORECASE)
            found = next((f for f in models if pattern.search(f)), None)
            if found is not None:
                return found
    return None if tag or not models else models[0]


def tag_of(files: Sequence[str], path: str) -> str | None:
    """A quantization tag that `pick_gguf` turns back into `path` (the name's last dash- or
    dot-separated word, or its last two), or None when none does.

    >>> tag_of(["M.Q4_1.gguf"], "M.Q4_1.gguf"), tag_of(["M-UD-Q4_K_XL.gguf"], "M-UD-Q4_K_XL.gguf")
    ('Q4_1', 'Q4_K_XL')
    """
    split = split_of(path)
    stem = split[0] if split else path.removesuffix(".gguf")
    words = re.split(r"[-.]", stem.rpartition("/")[2])
    for n in (1, 2):
        tag = "-".join(words[-n:])
        if len(words) > n and _TAG.fullmatch(tag) and pick_gguf(files, tag) == path:
            return tag
    return None
