"""A GGUF's own metadata, read from its header once: what `gguf.GGUFReader` reads, in a
fraction of its time; split GGUFs served from any part, a missing part named; the
named chat templates transformers' reader drops reach the tokenizer."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ffwd.models import ModelNotFound, gguf_meta, load_tokenizer, resolve_model
from ffwd.models.ggufmeta import split_parts
from ffwd.templates.choose import model_template
from tests.model_places import TOOL_USE, Home, embedded_gguf, write_split

EMBEDDED = embedded_gguf()


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The embedded model as three parts, dated like the embedded file: the same bytes
    every run, so ffwd's converted tokenizer for it is kept between runs."""
    parts = write_split(EMBEDDED, tmp_path_factory.mktemp("split") / "smol-00001-of-00003.gguf")
    stamp = EMBEDDED.stat().st_mtime
    for p in parts:
        os.utime(p, (stamp, stamp))
    return parts


def test_the_header_says_what_gguf_reader_says_in_a_fraction_of_its_time() -> None:
    import gguf

    t0 = time.perf_counter()
    reader = gguf.GGUFReader(EMBEDDED)
    t1 = time.perf_counter()
    meta = gguf_meta(EMBEDDED)
    t2 = time.perf_counter()
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            assert meta.lengths[name] == len(f.data)
        else:
            value = f.contents()
            assert meta.values[name] == pytest.approx(value) if isinstance(value, float) \
                else meta.values[name] == value
    assert (meta.architecture, meta.context_length, meta.quantization, meta.vocab_size) == \
        ("llama", 8192, "Q4_1", 49152)
    assert meta.special_ids == {"bos": 1, "eos": 2, "padding": 2, "unknown": 0}
    assert set(meta.templates) == {"default"} and "<|im_start|>" in meta.templates["default"]
    assert t2 - t1 < (t1 - t0) / 5
    assert gguf_meta(EMBEDDED) is meta  # read once


def test_a_damaged_header_is_one_clear_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(EMBEDDED.read_bytes()[:200_000])  # inside the vocabulary's array
    with pytest.raises(ValueError, match="cut short or damaged"):
        gguf_meta(cut)
    (tmp_path / "not.gguf").write_text("hello")
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_meta(tmp_path / "not.gguf")
    with pytest.raises(ModelNotFound, match="not a GGUF file"):
        resolve_model(str(tmp_path / "not.gguf"), Home(tmp_path).places(offline=True))


def test_a_split_gguf_is_served_from_its_first_part_whichever_part_is_named(
        split: list[Path]) -> None:
    assert [gguf_meta(p).split for p in split] == [(1, 3), (2, 3), (3, 3)]
    for part in split:
        ref = resolve_model(str(part))
        assert ref.path == split[0] and ref.parts == split and ref.name == "smol"
    assert sum(p.stat().st_size for p in split) > EMBEDDED.stat().st_size  # all the tensors


def test_a_missing_part_is_named(split: list[Path], tmp_path: Path) -> None:
    for p in split[:2]:
        shutil.copy(p, tmp_path / p.name)
    with pytest.raises(ValueError, match=r"part 3 of 3 is missing \(smol-00003-of-00003.gguf\)"):
        split_parts(tmp_path / split[0].name)
    home = Home(tmp_path)
    home.lmstudio_model("acme/split", {p.name: tmp_path / p.name for p in split[:2]})
    with pytest.raises(ModelNotFound, match="part 3 of 3 is missing"):
        resolve_model("acme/split", home.places(offline=True))
    home.lmstudio_model("acme/split", {split[2].name: split[2]})
    assert resolve_model("acme/split", home.places()).parts[2].resolve() == split[2]


def test_named_templates_reach_the_tokenizer(split: list[Path]) -> None:
    tok = load_tokenizer(resolve_model(str(split[0])))
    assert isinstance(tok.chat_template, dict) and tok.chat_template["tool_use"] == TOOL_USE
    assert model_template(tok) == TOOL_USE  # the tool_use variant is the one rendered
    assert tok.chat_template["default"] == gguf_meta(EMBEDDED).templates["default"]
    assert isinstance(load_tokenizer("default").chat_template, str)  # one template: as it was
