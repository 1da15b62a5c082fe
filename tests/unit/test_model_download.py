"""A Hub name no local place holds is downloaded into the Hub cache (from a Hub served on
loopback, `tests.hub_server`): only the files that serve it, a dropped connection resumed
where it stopped, and never a socket opened offline."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ffwd.models import ModelNotFound, resolve_model
from tests.hub_server import Hub
from tests.model_places import Home, embedded_gguf

EMBEDDED = embedded_gguf()
REPO = "acme/SmolLM2-135M-Instruct-GGUF"


def _sha(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _tiny_split(folder: Path) -> list[Path]:
    """A GGUF of two tiny tensors in two parts (llama.cpp's naming and split keys)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(folder / "tiny-Q8_0.gguf", "llama", split_max_tensors=1)
    w.add_context_length(64)
    for name in ("a", "b"):
        w.add_tensor(name, np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return [folder / f"tiny-Q8_0-0000{i}-of-00002.gguf" for i in (1, 2)]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # this test's Hub
    files = tmp_path / "files"
    files.mkdir()
    (files / "config.json").write_text('{"model_type": "llama"}')
    (files / "README.md").write_text("# a model")
    (files / "model.safetensors").write_bytes(b"\0" * 64)
    split = _tiny_split(files)
    h = Hub({
        REPO: {"SmolLM2-135M-Instruct-Q4_K_M.gguf": EMBEDDED, "README.md": files / "README.md",
               "mmproj-SmolLM2-F16.gguf": files / "README.md"},
        "acme/tiny-split-GGUF": {f"Q8_0/{p.name}": p for p in split},
        "acme/tiny-hf": {n: files / n for n in ("config.json", "README.md",
                                                "model.safetensors")},
    })
    yield h
    h.close()


def test_a_hub_name_is_downloaded_once_and_then_served_from_the_cache(
        hub: Hub, tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    ref = resolve_model(REPO, home.places(endpoint=hub.endpoint))
    assert ref.name == REPO and ref.gguf_file == "SmolLM2-135M-Instruct-Q4_K_M.gguf"
    assert ref.path.is_relative_to(home.hub / "models--acme--SmolLM2-135M-Instruct-GGUF")
    assert _sha(ref.path) == _sha(EMBEDDED)  # the embedded weights, byte for byte
    fetched = [p for m, p, _ in hub.requests if m == "GET" and "/resolve/" in p]
    assert fetched == [f"/{REPO}/resolve/main/SmolLM2-135M-Instruct-Q4_K_M.gguf"]  # no README
    hub.requests.clear()
    again = resolve_model(f"{REPO}:Q4_K_M", home.places(endpoint=hub.endpoint))
    assert again.path == ref.path and hub.requests == []  # local first: the Hub is not asked


def test_a_dropped_connection_resumes_where_it_stopped(hub: Hub, tmp_path: Path) -> None:
    hub.cut_after = 25_000_000
    ref = resolve_model(REPO, Home(tmp_path).places(endpoint=hub.endpoint))
    gets = [r for m, p, r in hub.requests if m == "GET" and p.endswith(".gguf")]
    assert len(gets) == 2 and gets[0] is None
    start = int(gets[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 25_000_000  # the second asked only for what it did not have
    assert _sha(ref.path) == _sha(EMBEDDED)


def test_every_part_of_a_split_and_what_a_transformers_model_needs(hub: Hub,
                                                                   tmp_path: Path) -> None:
    places = Home(tmp_path).places(endpoint=hub.endpoint)
    ref = resolve_model("acme/tiny-split-GGUF:q8_0", places)
    assert [p.name for p in ref.parts] == ["tiny-Q8_0-00001-of-00002.gguf",
                                          "tiny-Q8_0-00002-of-00002.gguf"]
    hf = resolve_model("acme/tiny-hf", places)
    assert hf.gguf_file is None
    assert sorted(p.name for p in hf.directory.iterdir()) == ["config.json", "model.safetensors"]


def test_what_the_hub_does_not_have_is_one_message(hub: Hub, tmp_path: Path) -> None:
    home = Home(tmp_path)
    with pytest.raises(ModelNotFound) as missing:
        resolve_model("acme/nothing-GGUF", home.places(endpoint=hub.endpoint))
    assert f"the Hub ({hub.endpoint}): RepositoryNotFoundError" in str(missing.value)
    with pytest.raises(ModelNotFound, match=r"has no GGUF tagged Q2_K \(its GGUF files: "
                       r"SmolLM2-135M-Instruct-Q4_K_M.gguf\)"):
        resolve_model(f"{REPO}:Q2_K", home.places(endpoint=hub.endpoint))
    done = subprocess.run([sys.executable, "-m", "ffwd.cli", "serve", "--model",
                           "acme/nothing-GGUF"], capture_output=True, text=True, timeout=120,
                          env=home.env() | {"HF_ENDPOINT": hub.endpoint})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "RepositoryNotFoundError" in done.stderr


def test_offline_never_opens_a_socket(hub: Hub, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        opened.append(address)
        raise OSError("no sockets offline")

    home = Home(tmp_path)
    home.hub_repo("acme/here-GGUF", {"here-Q4_K_M.gguf": EMBEDDED})
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    for places in (home.places(offline=True, endpoint=hub.endpoint),  # --offline
                   _hf_hub_offline(home, hub.endpoint)):
        with pytest.raises(ModelNotFound, match=r"not asked, offline"):
            resolve_model(REPO, places)
        assert resolve_model("acme/here-GGUF", places).path.resolve() == EMBEDDED.resolve()
    assert opened == [] and hub.requests == []


def _hf_hub_offline(home: Home, endpoint: str) -> Any:
    """HF_HUB_OFFLINE=1 in the environment, without --offline."""
    from ffwd.config.places import resolve_model_places

    return resolve_model_places(env=home.env() | {"HF_ENDPOINT": endpoint,
                                                  "HF_HUB_OFFLINE": "1"})


def test_ffwd_serve_offline_asks_the_hub_nothing(hub: Hub, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ffwd.cli", "serve", "--offline", "--model",
                           REPO], capture_output=True, text=True, timeout=120,
                          env=Home(tmp_path).env() | {"HF_ENDPOINT": hub.endpoint})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not asked, offline" in done.stderr and hub.requests == []
