"""Engine settings in ffwd.config: environment, overrides, and loud errors."""

from __future__ import annotations

import pytest

from ffwd.config import EngineConfig, resolve_engine_config
from ffwd.models import resolve_dtype


def test_defaults_env_and_overrides() -> None:
    assert resolve_engine_config({}) == EngineConfig()
    env = {"FFWD_DTYPE": "bf16", "FFWD_DEVICE": "cpu", "FFWD_THREADS": "2",
           "FFWD_PREFILL_CHUNK": "128"}
    cfg = resolve_engine_config(env, {"dtype": "float32", "threads": None})
    assert cfg == EngineConfig(dtype="float32", device="cpu", threads=2, prefill_chunk=128)


@pytest.mark.parametrize(
    ("env", "name"),
    [({"FFWD_DTYPE": "int8"}, "FFWD_DTYPE"), ({"FFWD_DEVICE": "tpu"}, "FFWD_DEVICE"),
     ({"FFWD_PREFILL_CHUNK": "0"}, "FFWD_PREFILL_CHUNK"), ({"FFWD_THREADS": "-1"}, "FFWD_THREADS")],
)
def test_bad_values_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        resolve_engine_config(env)


def test_unknown_override_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown engine setting"):
        resolve_engine_config({}, {"dtyp": "float32"})


def test_dtype_resolution() -> None:
    import torch

    assert resolve_dtype("float32", "cpu") == torch.float32
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)
