"""Where models live on this machine, and whether ffwd may download one.

The variables are the owners' own (Hugging Face's, Ollama's), read the way
their owners read them:

    HF_HUB_CACHE      the Hugging Face Hub cache            $HF_HOME/hub
                      (its older name HUGGINGFACE_HUB_CACHE too)
    HF_HOME           Hugging Face's folder                 $XDG_CACHE_HOME/huggingface,
                                                            else ~/.cache/huggingface
    HF_ENDPOINT       the Hub downloads come from           https://huggingface.co
    HF_HUB_OFFLINE    1/ON/YES/TRUE: never reach the Hub    0
                      (TRANSFORMERS_OFFLINE too, as huggingface_hub reads it)
    OLLAMA_MODELS     Ollama's models folder                ~/.ollama/models, and the
                                                            Linux service's
                                                            /usr/share/ollama/.ollama/models
    (LM Studio)       no variable: ~/.lmstudio/models, older installs ~/.cache/lm-studio/models

``--offline`` (`resolve_model_places(offline=True)`) is HF_HUB_OFFLINE=1 for one command.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
OLLAMA_SERVICE_MODELS = Path("/usr/share/ollama/.ollama/models")  # the Linux install's user
_TRUE = ("1", "ON", "YES", "TRUE")  # huggingface_hub's own reading of its flags


@dataclass(frozen=True, slots=True)
class ModelPlaces:
    """The folders `ffwd.models.resolve_model` looks in, in its order, and the Hub it may
    download from (never when `offline`)."""

    hub_cache: Path
    ollama: tuple[Path, ...]
    lmstudio: tuple[Path, ...]
    endpoint: str = DEFAULT_ENDPOINT
    offline: bool = False


def resolve_model_places(offline: bool | None = None,
                         env: Mapping[str, str] | None = None) -> ModelPlaces:
    """The places the environment names (module docstring); `offline` True (``--offline``)
    wins over HF_HUB_OFFLINE, None leaves it to the variable."""
    env = os.environ if env is None else env
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return ModelPlaces(
        hub_cache=hub_cache(env, home),
        ollama=(_path(env["OLLAMA_MODELS"], home),) if env.get("OLLAMA_MODELS", "").strip()
        else (home / ".ollama" / "models", OLLAMA_SERVICE_MODELS),
        lmstudio=(home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"),
        endpoint=(env.get("HF_ENDPOINT", "").strip() or DEFAULT_ENDPOINT).rstrip("/"),
        offline=bool(offline) or any(
            env.get(v, "").strip().upper() in _TRUE for v in ("HF_HUB_OFFLINE",
                                                             "TRANSFORMERS_OFFLINE")),
    )


def hub_cache(env: Mapping[str, str], home: Path) -> Path:
    """The Hub cache folder, as huggingface_hub finds it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # the second: its older name
        if env.get(var, "").strip():
            return _path(env[var], home)
    if env.get("HF_HOME", "").strip():
        return _path(env["HF_HOME"], home) / "hub"
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    return (_path(xdg, home) if xdg else home / ".cache") / "huggingface" / "hub"


def _path(raw: str, home: Path) -> Path:
    raw = raw.strip()
    return home / raw[2:] if raw.startswith("~/") else Path(raw).expanduser()
