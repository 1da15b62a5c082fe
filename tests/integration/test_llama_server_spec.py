"""Each of llama.cpp's draft-free speculation modes starts the native llama-server
(``make peers``) on the embedded model and answers one short greedy request with
drafts it verified (a few seconds each); the xllamacpp fallback answers too."""

from __future__ import annotations

import inspect
import textwrap

import httpx
import pytest

from ffwd.bench.systems import llama_server, servers
from ffwd.bench.systems.names import EXTRA_SPEC_MODES, SPEC_MODES
from ffwd.models import resolve_model

pytestmark = pytest.mark.slow
native = pytest.mark.skipif(llama_server.native_binary() is None,
                            reason="no native llama-server beside this Python: `make peers` "
                                   "builds it")

# A passage the model is asked to repeat: its answer re-quotes the prompt, which every
# mode drafts from (a passage of a few lines is too short for their n-gram keys).
PASSAGE = inspect.getsource(textwrap.indent)
PROMPT = (f"<|im_start|>user\n```python\n{PASSAGE}```\nRepeat that code exactly.<|im_end|>\n"
          "<|im_start|>assistant\n```python\n")


def complete(url: str) -> dict[str, object]:
    body = {"prompt": PROMPT, "n_predict": 48, "temperature": 0.0, "cache_prompt": False,
            "return_tokens": True}
    r = httpx.post(url + "/completion", json=body, timeout=120)
    r.raise_for_status()
    return dict(r.json())


@native
@pytest.mark.parametrize("mode", [None, *SPEC_MODES, *EXTRA_SPEC_MODES])
def test_speculation_mode_starts_and_speculates(mode: str | None) -> None:
    gguf = str(resolve_model("default").path)
    with servers.llama_server(gguf, threads=1, n_ctx=512, n_batch=512, spec=mode) as srv:
        assert srv.proc.args[0] == str(llama_server.native_binary())  # not the fallback
        out = complete(srv.url)
    check(out, mode)


def test_the_xllamacpp_fallback_serves_the_same_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_server, "native_binary", lambda upstream=False: None)
    assert llama_server.build()["kind"] == llama_server.FALLBACK
    gguf = str(resolve_model("default").path)
    with servers.llama_server(gguf, threads=1, n_ctx=512, n_batch=512,
                              spec="ngram-simple") as srv:
        out = complete(srv.url)
    check(out, "ngram-simple")


@native
def test_the_native_build_line_is_the_engines() -> None:
    from ffwd.engine.llama.native import system_info

    built = llama_server.build()
    assert built["kind"] == llama_server.NATIVE and built["version"]
    # the same vendored llama.cpp and flags: the same instruction sets
    assert built["system_info"] == system_info()


def check(out: dict[str, object], mode: str | None) -> None:
    timings = out["timings"]
    assert isinstance(timings, dict) and out["tokens"]
    assert str(out["content"]).startswith("def indent(text")
    if mode is None:
        assert "draft_n" not in timings
    else:
        assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]
