"""What users type for a model, read as text: Hub names as llama-server's -hf takes them,
Ollama names as `ollama run` takes them, the GGUF a quantization tag picks, split names."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ffwd.models.names import (
    HubName,
    OllamaName,
    hub_name,
    is_model_file,
    ollama_name,
    pick_gguf,
    split_name,
    split_of,
    tag_of,
)
from ffwd.models.resolve import closest

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
words = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,20}[A-Za-z0-9])?", fullmatch=True).filter(
    lambda w: "--" not in w and ".." not in w)
tags = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,12}", fullmatch=True)
QUANTS = ("Q4_K_M", "Q8_0", "Q4_0", "Q5_K_S", "IQ2_XXS", "F16", "BF16", "Q6_K")


@given(words, words, st.none() | tags)
def test_a_hub_name_reads_back_what_was_written(owner: str, name: str, tag: str | None) -> None:
    written = f"{owner}/{name}" + (f":{tag}" if tag else "")
    assert hub_name(written) == HubName(f"{owner}/{name}", tag)
    assert hub_name("hf.co/" + written) is None  # Ollama's name for a model from the Hub
    assert str(hub_name(written)) == written


@given(words, words, words)
def test_what_is_no_hub_name_is_refused(a: str, b: str, c: str) -> None:
    assert hub_name(a) is None  # no owner
    assert hub_name(f"{a}/{b}/{c}") is None  # a path, not a repository
    assert hub_name(f"{a}--x/{b}") is None  # the Hub's ids never hold "--"
    assert hub_name(f"{a}/{b}:") is None


@given(words, st.none() | words, st.none() | tags)
def test_an_ollama_name_fills_in_what_ollama_fills_in(model: str, ns: str | None,
                                                      tag: str | None) -> None:
    written = (f"{ns}/" if ns else "") + model + (f":{tag}" if tag else "")
    name = ollama_name(written)
    assert name == OllamaName("registry.ollama.ai", ns or "library", model, tag or "latest")
    assert ollama_name(str(name)) == name  # its short form names the same manifest
    assert ollama_name(f"registry.ollama.ai/{name.namespace}/{model}:{name.tag}") == name


def test_ollama_names_with_a_registry_and_library_are_one_model() -> None:
    assert ollama_name("library/qwen3:8b") == ollama_name("qwen3:8b")
    assert str(ollama_name("library/qwen3:8b")) == "qwen3:8b"
    hf = ollama_name("hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M")
    assert hf is not None and hf.parts == ("hf.co", "unsloth", "Qwen3-8B-GGUF", "Q4_K_M")
    assert str(hf) == "hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M"
    assert ollama_name("a/b/c/d") is None and ollama_name("qwen3:") is None


@given(st.text(_ALNUM + "_.-/", min_size=1, max_size=30), st.integers(1, 99), st.data())
def test_split_names_follow_llama_cpp(prefix: str, count: int, data: st.DataObject) -> None:
    no = data.draw(st.integers(1, count))
    name = split_name(prefix, no, count)
    assert re.fullmatch(r".+-\d{5}-of-\d{5}\.gguf", name)
    assert split_of(name) == (prefix, no, count)
    assert split_of(prefix + ".gguf") is None


@given(st.permutations(QUANTS), st.sampled_from(QUANTS), st.booleans())
def test_a_tag_picks_its_file_in_any_case(order: list[str], tag: str, lower: bool) -> None:
    files = [f"sub/Model-{q}.gguf" for q in order] + ["sub/mmproj-Model-F16.gguf"]
    assert pick_gguf(files, tag.lower() if lower else tag) == f"sub/Model-{tag}.gguf"


@given(st.permutations(QUANTS))
def test_without_a_tag_q4_k_m_then_q8_0_as_llama_server(order: list[str]) -> None:
    files = [f"M-{q}.gguf" for q in order]
    assert pick_gguf(files, None) == "M-Q4_K_M.gguf"
    assert pick_gguf([f for f in files if "Q4_K_M" not in f], None) == "M-Q8_0.gguf"
    rest = [f for f in files if "Q4_K_M" not in f and "Q8_0" not in f]
    assert pick_gguf(rest, None) == rest[0]  # else the first
    assert pick_gguf(rest, "Q3_K_L") is None  # a tag no file has picks none


def test_a_split_is_picked_by_its_first_part_and_projectors_never() -> None:
    parts = [split_name("Q4_K_M/M-Q4_K_M", i, 3) for i in (3, 2, 1)]
    assert pick_gguf(parts, "Q4_K_M") == parts[2]
    assert pick_gguf(["mmproj-Q4_K_M.gguf", "M.imatrix.gguf"], None) is None
    assert not is_model_file("x/mmproj-F16.gguf") and is_model_file("x/M-F16.gguf")


@given(st.lists(st.sampled_from(QUANTS), min_size=1, max_size=6, unique=True),
       st.sampled_from((".", "-")))
def test_the_tag_a_listing_shows_picks_the_file_back(quants: list[str], sep: str) -> None:
    files = sorted(f"Model{sep}{q}.gguf" for q in quants)
    for f in files:
        tag = tag_of(files, f)
        assert tag is not None and pick_gguf(files, tag) == f


def test_closest_names_hold_the_model_first() -> None:
    names = ["llama3.2:1b", "qwen3:8b", "Qwen/Qwen3-8B-GGUF:Q4_K_M", "gemma3:4b"]
    assert closest("qwen3:4b", names)[:2] == ["qwen3:8b", "Qwen/Qwen3-8B-GGUF:Q4_K_M"]
    assert closest("gemma3:1b", names)[0] == "gemma3:4b"
    assert closest("zzz", names) == []


def test_f16_never_picks_bf16_while_an_f16_file_is_there() -> None:
    files = ["M-BF16.gguf", "M-F16.gguf"]
    assert pick_gguf(files, "F16") == "M-F16.gguf" and pick_gguf(files, "bf16") == "M-BF16.gguf"
    assert pick_gguf(["M-BF16.gguf"], "F16") == "M-BF16.gguf"  # llama-server's match, last
