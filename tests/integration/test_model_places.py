"""Every way of naming a model serves the embedded weights: the engine runs on a name
resolved through each place (a split GGUF's path, the Hub cache, a Hub download, Ollama,
LM Studio) and decodes what the embedded model decodes; `ffwd serve` serves an Ollama
name and a Hub name from a temporary HOME; `ffwd models` lists each place's model by a
name that serves those bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ffwd.bench.systems.servers import ChildServer, free_port
from ffwd.engine.core.generate import generate
from ffwd.models import load_backend, load_tokenizer, resolve_model
from tests.hub_server import Hub
from tests.model_places import Home, embedded_gguf, write_split

EMBEDDED = embedded_gguf()
PROMPT = "The three primary colors are"
# One exact attention path (not one of two timed), so that every load decodes alike.
ENGINE: dict[str, Any] = {"deterministic": True, "kv_cache": "q8_0", "threads": 2}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    """A HOME holding the embedded model in each place, and a Hub that has it too."""
    import huggingface_hub.constants

    h = Home(tmp_path_factory.mktemp("home"))
    h.hub_repo("acme/smol-GGUF", {"smol-Q4_1.gguf": EMBEDDED})
    h.ollama_model("registry.ollama.ai", "library", "smollm2", "135m", EMBEDDED)
    h.lmstudio_model("acme/smollm2-gguf", {"SmolLM2-135M-Instruct.Q4_1.gguf": EMBEDDED})
    split = write_split(EMBEDDED, h.root / "split" / "smol-00001-of-00003.gguf")
    hub = Hub({"acme/remote-GGUF": {"remote-Q4_K_M.gguf": EMBEDDED}})
    with pytest.MonkeyPatch.context() as mp:  # this test's Hub, whatever HF_HUB_OFFLINE says
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        try:
            downloaded = resolve_model("acme/remote-GGUF", h.places(endpoint=hub.endpoint))
        finally:
            hub.close()
    # Dated like the embedded file: the same bytes every run, so ffwd's engine checks and
    # measured costs for them are kept between runs.
    stamp = EMBEDDED.stat().st_mtime
    for p in [*split, downloaded.path.resolve()]:
        os.utime(p, (stamp, stamp))
    yield h


def _decode(name: str, places: Any) -> list[int]:
    ref = resolve_model(name, places)
    tok = load_tokenizer(ref)
    backend = load_backend(ref, tokenizer=tok, **ENGINE)
    ids = tok.encode(PROMPT, add_special_tokens=False)
    return generate(backend, tok, ids, max_tokens=12).token_ids


@pytest.fixture(scope="module")
def embedded_ids() -> list[int]:
    return _decode("default", None)


@pytest.mark.parametrize("name", ["split/smol-00002-of-00003.gguf", "acme/smol-GGUF:Q4_1",
                                  "acme/remote-GGUF", "smollm2:135m", "acme/smollm2-gguf"])
def test_the_engine_decodes_the_embedded_model_through_each_place(
        home: Home, embedded_ids: list[int], name: str) -> None:
    if name.startswith("split/"):
        name = str(home.root / name)
    # The Hub download was made in the fixture; offline now: served from the Hub cache.
    assert _decode(name, home.places(offline=True)) == embedded_ids


def test_ffwd_serve_serves_an_ollama_name_and_a_hub_name(home: Home,
                                                         embedded_ids: list[int]) -> None:
    text = load_tokenizer("default").decode(embedded_ids, skip_special_tokens=True)
    for name in ("smollm2:135m", "acme/smol-GGUF:Q4_1"):
        port = free_port()
        cmd = [sys.executable, "-m", "ffwd.cli", "serve", "--port", str(port), "--offline",
               "--model", name, "--deterministic", "--kv-cache", "q8_0", "--threads", "2",
               "--parallel", "1"]
        with ChildServer("ffwd serve", cmd, port, startup_seconds=300,
                         env=home.env() | {"TOKENIZERS_PARALLELISM": "false"}) as server:
            models = httpx.get(server.url + "/v1/models", timeout=30).json()
            assert [m["id"] for m in models["data"]] == [name]
            reply = httpx.post(server.url + "/v1/completions", timeout=120, json={
                "model": name, "prompt": PROMPT, "max_tokens": 12, "temperature": 0}).json()
            assert reply["choices"][0]["text"] == text



def test_ffwd_models_lists_each_place_by_a_name_that_serves_the_embedded_weights(
        home: Home) -> None:
    done = subprocess.run([sys.executable, "-m", "ffwd.cli", "models", "--json"],
                          env=home.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert {n: rows[n]["place"] for n in ("acme/smol-GGUF:Q4_1", "acme/remote-GGUF:Q4_K_M",
                                          "smollm2:135m", "acme/smollm2-gguf:Q4_1")} == {
        "acme/smol-GGUF:Q4_1": "Hub cache", "acme/remote-GGUF:Q4_K_M": "Hub cache",
        "smollm2:135m": "Ollama", "acme/smollm2-gguf:Q4_1": "LM Studio"}
    for name, row in rows.items():
        if row["place"] == "embedded":
            continue
        path = resolve_model(name, home.places(offline=True)).path
        assert path == Path(row["path"])
        # A link to the embedded file, or the Hub's download of it: the same bytes.
        assert path.resolve() == EMBEDDED.resolve() or path.read_bytes() == EMBEDDED.read_bytes()
        assert (row["quantization"], row["context_length"], row["size"]) == \
            ("Q4_1", 8192, EMBEDDED.stat().st_size)
