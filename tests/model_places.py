"""Where users keep models, built small in a temporary HOME from the embedded model.

`Home(root)` lays out the folders as their owners do: a Hugging Face Hub cache
(``models--ORG--NAME`` with ``refs/main``, a snapshot of links into ``blobs/``),
Ollama's ``manifests/`` and ``blobs/``, LM Studio's ``PUBLISHER/REPO/``. Each
file is a link to the embedded GGUF, so every name serves the same weights
and ffwd's caches (keyed by the file a link leads to) are shared with the
embedded model's. `write_split` writes a real split GGUF of the embedded
model with the `gguf` package, with a named ``tool_use`` template added.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ffwd.config.places import ModelPlaces, resolve_model_places
from ffwd.models import resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOOL_USE = "{# tool_use #}{% for m in messages %}{{ m['content'] }}{% endfor %}<tool_call>"


def embedded_gguf() -> Path:
    return resolve_model("default").path


class Home:
    """A user's HOME under `root`, with the places `ffwd.config.places` finds there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hub = root / ".cache" / "huggingface" / "hub"
        self.ollama = root / ".ollama" / "models"
        self.lmstudio = root / ".lmstudio" / "models"

    def env(self) -> dict[str, str]:
        """The environment of a user with this HOME (ffwd's own cache stays the real one)."""
        from ffwd.config import cache_dir

        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("HF_", "HUGGINGFACE_", "OLLAMA_", "XDG_"))}
        return {**keep, "HOME": str(self.root), "FFWD_CACHE_DIR": str(cache_dir())}

    def places(self, offline: bool = False, endpoint: str | None = None) -> ModelPlaces:
        env = self.env() | ({"HF_ENDPOINT": endpoint} if endpoint else {})
        return resolve_model_places(offline=offline, env=env)

    def hub_repo(self, repo: str, files: dict[str, Path], commit: str = COMMIT) -> Path:
        """``repo`` in the Hub cache at `commit` (``refs/main``), `files` (name in the
        repository -> target) as huggingface_hub links them; the snapshot folder."""
        folder = self.hub / ("models--" + repo.replace("/", "--"))
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(commit)
        snap = folder / "snapshots" / commit
        for name, target in files.items():
            blob = folder / "blobs" / hashlib.sha256(name.encode()).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.symlink_to(target)
            link = snap / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
        return snap

    def ollama_model(self, host: str, namespace: str, model: str, tag: str,
                     target: Path) -> Path:
        """An Ollama manifest for ``model:tag`` whose model layer is a blob linked to
        `target`, beside a template layer as Ollama writes one; the blob."""
        digest = hashlib.sha256(f"{model}:{tag}".encode()).hexdigest()
        blob = self.ollama / "blobs" / f"sha256-{digest}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.symlink_to(target)
        manifest = self.ollama / "manifests" / host / namespace / model / tag
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "digest": "sha256:" + "0" * 64, "size": 2},
            "layers": [
                {"mediaType": "application/vnd.ollama.image.model",
                 "digest": f"sha256:{digest}", "size": target.stat().st_size},
                {"mediaType": "application/vnd.ollama.image.template",
                 "digest": "sha256:" + "1" * 64, "size": 10},
            ]}))
        return blob

    def lmstudio_model(self, repo: str, files: dict[str, Path]) -> Path:
        folder = self.lmstudio / repo
        folder.mkdir(parents=True, exist_ok=True)
        for name, target in files.items():
            (folder / name).symlink_to(target)
        return folder


def write_split(src: Path, first: Path, parts: int = 3) -> list[Path]:
    """`src` written again as a split GGUF of `parts` parts named from `first`
    (``NAME-00001-of-0000N.gguf``), a named ``tool_use`` template added; the parts."""
    prefix = first.name.removesuffix(f"-00001-of-{parts:05d}.gguf")
    _rewrite(src, first.with_name(prefix + ".gguf"), {
        "tokenizer.chat_template.tool_use": TOOL_USE, "tokenizer.chat_templates": ["tool_use"]},
        parts)
    return [first.with_name(f"{prefix}-{i:05d}-of-{parts:05d}.gguf") for i in range(1, parts + 1)]


def write_with_template(src: Path, dest: Path, template: str) -> Path:
    """`src` written again as `dest` with `template` as its ``tokenizer.chat_template``,
    dated like `src` (the same bytes each run: ffwd's converted tokenizer is kept)."""
    _rewrite(src, dest, {"tokenizer.chat_template": template})
    stamp = src.stat().st_mtime
    os.utime(dest, (stamp, stamp))
    return dest


def _rewrite(src: Path, dest: Path, fields: dict[str, Any], parts: int = 1) -> None:
    """`src`'s metadata and tensors written to `dest` (in `parts` parts), `fields` set."""
    import gguf

    dest.parent.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    per_part = -(-len(reader.tensors) // parts) if parts > 1 else 0
    writer = gguf.GGUFWriter(dest, arch, split_max_tensors=per_part)
    for field in reader.fields.values():
        if field.name in fields or field.name == "general.architecture" or \
                field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for name, value in fields.items():
        if isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_string(name, value)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
