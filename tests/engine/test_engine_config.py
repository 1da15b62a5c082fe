"""Engine settings in ffwd.config: environment, overrides, and loud errors."""

from __future__ import annotations

import pytest

from ffwd.config import EngineConfig, resolve_engine_config
from ffwd.models import choose_backend, torch_dtype


def test_defaults_env_and_overrides() -> None:
    assert resolve_engine_config({}) == EngineConfig()
    env = {"FFWD_DTYPE": "bf16", "FFWD_DEVICE": "cpu", "FFWD_THREADS": "2",
           "FFWD_PREFILL_CHUNK": "128", "FFWD_BACKEND": "LlamaCpp", "FFWD_CONTEXT": "2048",
           "FFWD_LLAMACPP_LOG": "1"}
    cfg = resolve_engine_config(env, {"dtype": "float32", "threads": None, "backend": "auto"})
    assert cfg == EngineConfig(backend="auto", dtype="float32", device="cpu", threads=2,
                               prefill_chunk=128, context=2048, llamacpp_log=True)


@pytest.mark.parametrize(
    ("env", "name"),
    [({"FFWD_DTYPE": "int8"}, "FFWD_DTYPE"), ({"FFWD_DEVICE": "tpu"}, "FFWD_DEVICE"),
     ({"FFWD_PREFILL_CHUNK": "0"}, "FFWD_PREFILL_CHUNK"), ({"FFWD_THREADS": "-1"}, "FFWD_THREADS"),
     ({"FFWD_BACKEND": "vllm"}, "FFWD_BACKEND"), ({"FFWD_CONTEXT": "-5"}, "FFWD_CONTEXT"),
     ({"FFWD_LLAMACPP_LOG": "loud"}, "FFWD_LLAMACPP_LOG")],
)
def test_bad_values_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        resolve_engine_config(env)


def test_unknown_override_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown engine setting"):
        resolve_engine_config({}, {"dtyp": "float32"})


def test_dtype_resolution() -> None:
    import torch

    assert torch_dtype("float32", "cpu") == torch.float32
    assert torch_dtype("auto", "cuda") == torch.bfloat16
    assert torch_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)


@pytest.mark.parametrize(
    ("requested", "gguf", "device", "engine"),
    [("auto", True, "cpu", "llamacpp"), ("auto", False, "cpu", "transformers"),
     ("auto", True, "cuda", "transformers"), ("auto", True, "cuda:1", "transformers"),
     ("transformers", True, "cpu", "transformers"), ("llamacpp", True, "cpu", "llamacpp")],
)
def test_choose_backend(requested: str, gguf: bool, device: str, engine: str) -> None:
    assert choose_backend(requested, gguf=gguf, device=device) == engine


def test_a_gguf_file_on_cuda_runs_on_llama_cpp_where_the_build_offloads() -> None:
    for requested in ("auto", "llamacpp"):
        assert choose_backend(requested, gguf=True, device="cuda", gpu_offload=True) == "llamacpp"
    assert choose_backend("auto", gguf=False, device="cuda", gpu_offload=True) == "transformers"


@pytest.mark.parametrize(("gguf", "device", "says"),
                         [(False, "cpu", "runs .gguf files"),
                          (True, "cuda", "this llama.cpp build runs on the CPU only")])
def test_llamacpp_where_it_cannot_run_is_an_error(gguf: bool, device: str, says: str) -> None:
    with pytest.raises(ValueError, match=f"FFWD_BACKEND=llamacpp:? {says}"):
        choose_backend("llamacpp", gguf=gguf, device=device)
