"""What only the llama.cpp backend has: rows asked for, a quiet log, the vocabulary check."""

from __future__ import annotations

from typing import Any

import pytest

from ffwd.engine.llama.native import init_llama
from ffwd.models import check_vocab
from tests.engine.backends import make_backend
from tests.engine.tiny_gguf import piece


def test_append_asks_llama_cpp_for_the_last_row_only() -> None:
    b = make_backend("llamacpp:llama")
    lib = init_llama()
    b.prefill([5, 6, 7, 8])
    b.forward([9, 10, 11])
    assert all(lib.llama_get_logits_ith(b.context._ctx[0], i) for i in range(3))
    b.append([12, 13, 14])
    assert not lib.llama_get_logits_ith(b.context._ctx[0], 0)  # never computed, never copied
    assert lib.llama_get_logits_ith(b.context._ctx[0], 2)


def test_llama_cpp_logs_nothing_unless_asked(capfd: pytest.CaptureFixture[str]) -> None:
    b = make_backend("llamacpp:mamba")
    b.prefill([3, 4, 5])
    assert b.append([6]).shape == (64,)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


class Tokenizer:
    """The members `check_vocab` reads, over the tiny GGUF's vocabulary."""

    def __init__(self, size: int = 64, eos: int = 2, names: dict[int, str] | None = None) -> None:
        self.size, self.eos_token_id, self.unk_token_id = size, eos, 0
        self.names = names or {}
        self.asked: list[int] = []  # the ids whose spelling was compared

    def __len__(self) -> int:
        return self.size

    def convert_ids_to_tokens(self, i: int) -> str:
        self.asked.append(i)
        return self.names.get(i, piece(i))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [0, 0]  # no turn-end marker is one token here


def test_the_vocabulary_check_accepts_the_matching_tokenizer() -> None:
    b = make_backend("llamacpp:llama", eos=(2,))
    tok = Tokenizer()
    check_vocab(b, tok, "tiny")  # raises on a mismatch
    # It compared the spelling of every end id, and they agree.
    assert b.eos_ids == {2} and tok.asked == [2]
    assert tok.convert_ids_to_tokens(2) == b.context.token_text(2)


@pytest.mark.parametrize(
    ("tokenizer", "says"),
    [(Tokenizer(size=65), "the tokenizer has 65 ids but llama.cpp's vocabulary has 64"),
     (Tokenizer(eos=7), r"the tokenizer ends turns with id 7 \('t7'\), which llama.cpp"),
     (Tokenizer(names={2: "</s>"}), r"id 2 is '</s>' to the tokenizer but '<c2>' to llama.cpp")],
    ids=["size", "eos", "spelling"],
)
def test_the_vocabulary_check_refuses_another_tokenizer(tokenizer: Any, says: str) -> None:
    with pytest.raises(ValueError, match=f"tiny: {says}"):
        check_vocab(make_backend("llamacpp:llama", eos=(2,)), tokenizer, "tiny")
