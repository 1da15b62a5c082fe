"""Model resolution and loading: the embedded default, gemma3, HF dirs and GGUF files.

`resolve_model(spec)` turns what a user types (``default``, ``gemma3``, a HF
directory, a ``.gguf`` file) into a `ModelRef` (`files`); `load_backend`
loads it on the engine `choose_backend` picks, after `check_engine` ran a
first forward in a child process on llama.cpp (`load`); the transformers
engine's weights are in `weights`, the cached forward cost curves in `costs`;
`cache` reads what is kept under the cache folder, or builds a damaged entry again.
"""

from ffwd.models.costs import (
    cost_curve_path,
    llama_cost_parts,
    load_or_measure,
    read_cost_curve,
)
from ffwd.models.files import (
    ALIASES,
    DEFAULT_MODEL,
    ModelRef,
    load_tokenizer,
    resolve_model,
)
from ffwd.models.load import (
    EngineFailure,
    check_engine,
    check_vocab,
    choose_backend,
    engine_for,
    load_backend,
)
from ffwd.models.weights import load_model, pick_device, torch_dtype

__all__ = [
    "ALIASES", "DEFAULT_MODEL", "EngineFailure", "ModelRef", "check_engine", "check_vocab",
    "choose_backend", "cost_curve_path", "engine_for", "llama_cost_parts", "load_backend",
    "load_model", "load_or_measure", "load_tokenizer", "pick_device", "read_cost_curve",
    "resolve_model", "torch_dtype",
]
