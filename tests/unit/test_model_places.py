"""--model finds models where users keep them: a path, the Hub cache, Ollama, LM Studio, a
split GGUF; `ffwd models` lists them by names that serve them; a model nowhere is one
message naming where ffwd looked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ffwd.cli import main as ffwd_main
from ffwd.models import ModelNotFound, list_models, resolve_model
from tests.model_places import Home, embedded_gguf

EMBEDDED = embedded_gguf()
HUB = "acme/SmolLM2-135M-Instruct-GGUF"
# Every way of naming the embedded model in `home` below, and the name it is served as.
NAMES = {
    f"{HUB}:Q4_1": f"{HUB}:Q4_1", f"{HUB}:q4_1": f"{HUB}:q4_1",
    HUB.lower() + ":Q4_1": HUB.lower() + ":Q4_1",  # the Hub's names are in any case
    "smollm2:135m": "smollm2:135m", "library/smollm2:135m": "smollm2:135m",
    "registry.ollama.ai/library/smollm2:135m": "smollm2:135m",
    f"hf.co/{HUB}:Q4_1": f"hf.co/{HUB}:Q4_1",  # Ollama's name of a model from the Hub
    "acme/smollm2-gguf": "acme/smollm2-gguf", "acme/smollm2-gguf:Q4_1": "acme/smollm2-gguf:Q4_1",
    "acme/smollm2-gguf/SmolLM2-135M-Instruct.Q4_1.gguf":
        "acme/smollm2-gguf/SmolLM2-135M-Instruct.Q4_1.gguf",
    "old/smol-gguf": "old/smol-gguf",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    h = Home(tmp_path_factory.mktemp("home"))
    h.hub_repo(HUB, {"SmolLM2-135M-Instruct-Q4_1.gguf": EMBEDDED,
                     "Q8_0/SmolLM2-135M-Instruct-Q8_0.gguf": EMBEDDED,
                     "mmproj-SmolLM2-F16.gguf": EMBEDDED})
    h.ollama_model("registry.ollama.ai", "library", "smollm2", "135m", EMBEDDED)
    h.ollama_model("hf.co", "acme", "SmolLM2-135M-Instruct-GGUF", "Q4_1", EMBEDDED)
    h.lmstudio_model("acme/smollm2-gguf", {"SmolLM2-135M-Instruct.Q4_1.gguf": EMBEDDED})
    old = Home(h.root)
    old.lmstudio = h.root / ".cache" / "lm-studio" / "models"  # an older install's folder
    old.lmstudio_model("old/smol-gguf", {"smol-Q4_1.gguf": EMBEDDED})
    return h


@pytest.mark.parametrize("name", NAMES)
def test_each_way_of_naming_serves_the_embedded_file(home: Home, name: str) -> None:
    ref = resolve_model(name, home.places())
    assert ref.path.resolve() == EMBEDDED.resolve()
    assert ref.name == NAMES[name]  # one model, one served name however it was typed
    assert ref.cache_key == resolve_model("default").cache_key  # converted and measured once


def test_a_path_serves_what_it_names(home: Home) -> None:
    snapshot = home.hub / f"models--{HUB.replace('/', '--')}" / "snapshots"
    folder = next(snapshot.iterdir())
    assert resolve_model(str(EMBEDDED)).path == EMBEDDED
    ref = resolve_model(str(folder), home.places())  # a folder of GGUFs: the default pick,
    assert ref.path == folder / "Q8_0/SmolLM2-135M-Instruct-Q8_0.gguf"  # Q8_0 without Q4_K_M


def test_a_tag_picks_its_file_and_the_hub_cache_follows_refs_main(home: Home,
                                                                   tmp_path: Path) -> None:
    ref = resolve_model(f"{HUB}:Q8_0", home.places())
    assert ref.path.relative_to(ref.path.parents[1]).as_posix() == \
        "Q8_0/SmolLM2-135M-Instruct-Q8_0.gguf"
    with pytest.raises(ModelNotFound, match=r"no acme/SmolLM2-135M-Instruct-GGUF:Q2_K"):
        resolve_model(f"{HUB}:Q2_K", home.places(offline=True))
    mine = Home(tmp_path)
    mine.hub_repo("o/r", {"old-Q4_K_M.gguf": EMBEDDED}, commit="a" * 40)
    time.sleep(0.01)
    mine.hub_repo("o/r", {"new-Q4_K_M.gguf": EMBEDDED}, commit="b" * 40)
    (mine.hub / "models--o--r" / "refs" / "main").write_text("a" * 40)
    assert resolve_model("o/r", mine.places()).gguf_file == "old-Q4_K_M.gguf"  # refs/main
    (mine.hub / "models--o--r" / "refs" / "main").unlink()
    assert resolve_model("o/r", mine.places()).gguf_file == "new-Q4_K_M.gguf"  # the newest


def test_a_hub_directory_is_a_transformers_model(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    for name, text in (("config.json", '{"max_position_embeddings": 2048, "torch_dtype": '
                        '"bfloat16"}'), ("tokenizer_config.json", '{"chat_template": '
                                         '"{{ messages }}<think>"}')):
        (files / name).write_text(text)
    home = Home(tmp_path)
    snap = home.hub_repo("Qwen/Qwen3-8B", {n: files / n for n in ("config.json",
                                                                   "tokenizer_config.json")})
    ref = resolve_model("Qwen/Qwen3-8B", home.places())
    assert ref.gguf_file is None and ref.directory == snap
    (listed,) = list_models(home.places())[2:]  # after the two embedded ones
    assert (listed.name, listed.place, listed.context_length, listed.quantization,
            listed.reasons) == ("Qwen/Qwen3-8B", "Hub cache", 2048, "bfloat16", True)


def test_ffwd_models_lists_every_place_by_names_that_serve_it(
        home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in os.environ:
        if key.startswith(("HF_", "HUGGINGFACE_", "OLLAMA_", "XDG_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home.root))
    assert ffwd_main(["models", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_name = {r["name"]: r for r in rows}
    assert {f"{HUB}:Q4_1", f"{HUB}:Q8_0", "smollm2:135m",
            "hf.co/acme/SmolLM2-135M-Instruct-GGUF:Q4_1", "acme/smollm2-gguf:Q4_1",
            "old/smol-gguf:Q4_1", "default"} <= set(by_name)
    assert not any("mmproj" in n for n in by_name)
    assert {r["place"] for r in rows} >= {"embedded", "Hub cache", "Ollama", "LM Studio"}
    smol = by_name["smollm2:135m"]
    assert (smol["quantization"], smol["context_length"], smol["size"], smol["reasons"]) == \
        ("Q4_1", 8192, EMBEDDED.stat().st_size, False)
    for row in rows:  # each name the listing shows serves the file it shows
        if row["place"] != "embedded":
            assert resolve_model(row["name"]).path == Path(row["path"])
    assert ffwd_main(["models"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:7] == ["name", "where", "size", "quant", "context", "tools",
                                    "reasons"]
    assert any(line.startswith("smollm2:135m ") and "Ollama" in line for line in table)


def test_a_model_nowhere_is_one_message_naming_where_ffwd_looked(home: Home) -> None:
    done = subprocess.run([sys.executable, "-m", "ffwd.cli", "serve", "--model",
                           "smollm2:360m"], env=home.env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("ffwd serve: model 'smollm2:360m' was not found")
    for where in ("a path", "Hugging Face Hub cache", f"Ollama ({home.ollama}",
                  f"LM Studio ({home.lmstudio}", "the Hub"):
        assert where in done.stderr
    assert "no smollm2:360m; closest there: smollm2:135m" in done.stderr


def test_an_ollama_manifest_without_its_blob_says_so(tmp_path: Path) -> None:
    home = Home(tmp_path)
    blob = home.ollama_model("registry.ollama.ai", "library", "gone", "1b", EMBEDDED)
    blob.unlink()
    with pytest.raises(ModelNotFound, match="which is missing"):
        resolve_model("gone:1b", home.places())
    (home.ollama / "manifests/registry.ollama.ai/library/gone/1b").write_text('{"layers": []}')
    with pytest.raises(ModelNotFound, match="without a model layer"):
        resolve_model("gone:1b", home.places())
