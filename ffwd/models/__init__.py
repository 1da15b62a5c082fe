"""Models: where they live, their files and metadata, and loading them on an engine.

`resolve_model(spec)` turns what a user types (an alias, a path, a Hub name, an
Ollama or LM Studio name) into a `ModelRef`, every local place first, then a
Hub download (`resolve`; the places: `hubcache`, `ollama`, `lmstudio`, `download`,
`folders`; the names read as text: `names`); `list_models` lists what those
places hold (`listing`); `gguf_meta` reads a GGUF's header once (`ggufmeta`);
`load_tokenizer` converts its tokenizer once (`tokenizer`); `load_backend`
loads it on the engine `choose_backend` picks, after `check_engine` ran a first
forward in a child process on llama.cpp (`load`); the transformers engine's
weights are in `weights`, the cached forward cost curves in `costs`; `cache`
reads what is kept under the cache folder, or builds a damaged entry again.
"""

from ffwd.models.costs import (
    cost_curve_path,
    llama_cost_parts,
    load_or_measure,
    read_cost_curve,
)
from ffwd.models.files import ALIASES, DEFAULT_MODEL, Found, ModelRef
from ffwd.models.ggufmeta import GgufMeta, gguf_meta
from ffwd.models.listing import Listed, list_models, template_traits
from ffwd.models.load import (
    EngineFailure,
    check_engine,
    check_vocab,
    choose_backend,
    engine_for,
    load_backend,
)
from ffwd.models.resolve import ModelNotFound, resolve_model
from ffwd.models.tokenizer import load_tokenizer
from ffwd.models.weights import load_model, pick_device, torch_dtype

__all__ = [
    "ALIASES", "DEFAULT_MODEL", "EngineFailure", "Found", "GgufMeta", "Listed", "ModelNotFound",
    "ModelRef", "check_engine", "check_vocab", "choose_backend", "cost_curve_path",
    "engine_for", "gguf_meta", "list_models", "llama_cost_parts", "load_backend", "load_model",
    "load_or_measure", "load_tokenizer", "pick_device", "read_cost_curve", "resolve_model",
    "template_traits", "torch_dtype",
]
