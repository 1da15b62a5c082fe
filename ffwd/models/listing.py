"""What ffwd can serve from the places it looks in (`ffwd models`), each read from its files.

A GGUF's row comes from its header (`ffwd.models.ggufmeta`: the quantization,
the context length, the chat template), a Hugging Face directory's from its
``config.json`` and ``tokenizer_config.json``; nothing is loaded or converted.
`template_traits` says what the chosen template writes: its tool-call format
and whether it reasons.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ffwd.config.places import ModelPlaces, resolve_model_places
from ffwd.models import hubcache, lmstudio, ollama
from ffwd.models.files import Found, embedded_listed
from ffwd.models.ggufmeta import gguf_meta


@dataclass(frozen=True, slots=True)
class Listed:
    """One model `ffwd models` lists: the name that serves it and what its files say
    (None: they do not say)."""

    name: str
    place: str
    path: str
    size: int
    quantization: str | None
    context_length: int | None
    tool_format: str
    reasons: bool | None  # None: no chat template to tell

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_models(places: ModelPlaces | None = None) -> list[Listed]:
    """Every model the embedded packages, the Hub cache, Ollama and LM Studio hold."""
    places = places or resolve_model_places()
    found = [*embedded_listed(), *hubcache.listed(places), *ollama.listed(places),
             *lmstudio.listed(places)]
    return [describe(f) for f in found]


def describe(found: Found) -> Listed:
    """`found`'s row, from its files."""
    ref = found.ref
    if ref.gguf_file is not None:
        meta = gguf_meta(ref.path)
        size = found.size or sum(p.stat().st_size for p in ref.parts)
        quant, context, templates = meta.quantization, meta.context_length, meta.templates
    else:
        size = sum(p.stat().st_size for p in ref.directory.rglob("*") if p.is_file())
        quant, context, templates = _hf_facts(ref.directory)
    fmt, reasons = template_traits(_chosen(templates))
    return Listed(found.name, found.place, str(ref.path), size, quant, context, fmt, reasons)


def template_traits(template: str | None) -> tuple[str, bool | None]:
    """(the tool-call format `template` writes, or "-"; whether it reasons, None without a
    template). The one place `ffwd models` asks this."""
    from ffwd.templates.formats import recognize

    if template is None:
        return "-", None
    found = recognize(template)
    fmt = found.format.name if found.format is not None else "-"
    return fmt, "<think>" in template or "reasoning_content" in template


def _chosen(templates: dict[str, str]) -> str | None:
    """The template ffwd renders with, by the rule it renders by (``tool_use`` first)."""
    from ffwd.templates.choose import model_template

    return model_template(SimpleNamespace(chat_template=templates)) if templates else None


def _hf_facts(folder: Path) -> tuple[str | None, int | None, dict[str, str]]:
    """(quantization or dtype, context length, chat templates) of a HF model directory."""
    config = _json(folder / "config.json")
    text, quantized = (v if isinstance(v := config.get(k), dict) else {}
                       for k in ("text_config", "quantization_config"))
    context = config.get("max_position_embeddings") or text.get("max_position_embeddings")
    quant = quantized.get("quant_method") or config.get("torch_dtype") or config.get("dtype")
    raw = _json(folder / "tokenizer_config.json").get("chat_template")
    templates = {t["name"]: t["template"] for t in raw if isinstance(t, dict)} \
        if isinstance(raw, list) else {"default": raw} if isinstance(raw, str) else {}
    jinja = folder / "chat_template.jinja"
    if "default" not in templates and jinja.is_file():
        templates["default"] = jinja.read_text(encoding="utf-8")
    return (str(quant) if quant else None, context if isinstance(context, int) else None,
            templates)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
