"""llguidance behind ffwd's two hooks: a token mask and a ``grammar`` source.

``grammar_tokenizer(tokenizer, vocab_size, eos_ids)``
    llguidance's view of a fast HF tokenizer (about 0.3 s: build once per
    model). The mask is `vocab_size` wide, so it fits the backend's logits;
    `eos_ids` are what the grammar allows once it is complete.
``compile_grammar(lark, lltok, where) -> Grammar``
    Validates the Lark text; a grammar llguidance rejects raises
    `GrammarError`: one sentence that starts with `where` and gives
    llguidance's reason without the grammar it quotes (`schema_reason`); the
    grammar itself goes to the log at debug level.
``Grammar.new_constraint() -> GrammarConstraint``
    One request's matcher, exposed twice over the same state:

    * `TokenConstraint` for the sampler: ``mask(logits, generated)`` puts
      -inf on every id the grammar forbids after the output `generated`;
    * a `ProposalSource` (name ``grammar``, origin ``grammar``, policy
      ``assert``) for `FillSession`: ``propose`` returns the tokens the
      grammar forces (``compute_ff_tokens``), ``observe`` follows the
      committed output, ``admit(ids)`` says how much of any proposal the
      grammar accepts.

The matcher follows whichever output it is asked about: it rolls back to the
longest common prefix with that output and consumes the rest (`sync`),
comparing only the ids past the output committed when it last synced (the
session's `observe` tells it what is committed). A
verified span that the model rejected is thereby rolled back with the cache;
`position` is what the decode loop checks under ``FFWD_FILL_TRACE``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import llguidance.hf
import numpy as np
import torch

from ffwd.fill import Proposal, TokenView, common_prefix

ERROR_CHARS = 400  # llguidance's reasons can quote the whole grammar
log = logging.getLogger("ffwd.grammar")
# llguidance's reason: "at 2(10): failed to compile JSON schema: <why>", then the grammar's
# numbered lines ("   2 | content: %json {...}") and a caret line under the place.
_PLACE = re.compile(r"^at \d+\(\d+\): ")
_LISTING = re.compile(r"^\s*(\d+ \|.*|\^+)\s*$")
_PREFIXES = ("failed to compile JSON schema: ", "Parser Error: ")


class GrammarError(ValueError):
    """A grammar llguidance cannot compile, or a request part it cannot be built
    from; the message says where and why, `param` names the request field."""

    def __init__(self, message: str, param: str = "tools") -> None:
        super().__init__(message)
        self.param = param


def grammar_tokenizer(tokenizer: Any, vocab_size: int, eos_ids: Iterable[int]) -> Any:
    """llguidance's tokenizer for a fast HF tokenizer, `vocab_size` ids wide."""
    eos = sorted({int(i) for i in eos_ids})
    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos or None)


def special_tokens(tokenizer: Any, lltok: Any) -> dict[str, int]:
    """The added tokens llguidance treats as special (they never match text)."""
    added: Mapping[int, Any] = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    out = {}
    for i, tok in added.items():
        text = str(getattr(tok, "content", tok))
        if i < lltok.vocab_size and lltok.is_special_token(i):
            out[text] = int(i)
    return out


@dataclass(frozen=True)
class Grammar:
    """A validated grammar; `new_constraint` gives each request its own matcher."""

    lark: str
    serialized: str
    tokenizer: Any

    def new_constraint(self) -> GrammarConstraint:
        matcher = llguidance.LLMatcher(self.tokenizer, self.serialized, log_level=0)
        if matcher.is_error():
            raise GrammarError(f"grammar: {_reason(matcher.get_error())}")
        return GrammarConstraint(matcher, self.tokenizer.vocab_size)


def compile_grammar(lark: str, lltok: Any, where: str, param: str = "tools") -> Grammar:
    """Validate `lark` against `lltok`; otherwise a `GrammarError`, one sentence naming
    `where` (``tool 'x': its parameters schema``) and what is wrong with it."""
    serialized = llguidance.LLMatcher.grammar_from_lark(lark)
    error = llguidance.LLMatcher.validate_grammar(serialized, lltok)
    if error and not error.startswith("WARNING"):
        log.debug("%s: llguidance cannot compile the grammar: %s\n%s", where, error, lark)
        raise GrammarError(f"{where} cannot be enforced: {schema_reason(error)}", param)
    return Grammar(lark, serialized, lltok)


def schema_reason(error: str) -> str:
    """What is wrong, from llguidance's reason, without the grammar text it quotes.

    >>> schema_reason("at 2(10): failed to compile JSON schema: Invalid type: wat\\n"
    ...               '   1 | start: content\\n   2 | content: %json {"type": "wat"}\\n  ^\\n')
    'Invalid type: wat'
    >>> schema_reason("at 2(10): failed to compile JSON schema: regex parse error:\\n"
    ...               "    (?<=a)b\\n    ^^^^\\nerror: look-around is not supported\\n"
    ...               "   2 | content: %json {}\\n")
    "pattern '(?<=a)b': look-around is not supported"
    """
    lines = [ln for ln in error.strip().splitlines() if ln.strip() and not _LISTING.match(ln)]
    head = _PLACE.sub("", lines[0].strip()) if lines else "no reason given"
    for prefix in _PREFIXES:
        head = head.removeprefix(prefix)
    if head.startswith("regex parse error:") and len(lines) > 1:
        why = next((ln.strip().removeprefix("error: ") for ln in lines
                    if ln.strip().startswith("error:")), head)
        head = f"pattern {lines[1].strip()!r}: {why}"
    return _reason(head)


def _reason(error: str) -> str:
    text = " ".join(error.split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


class GrammarConstraint:
    """One request's grammar state: a logits mask and a ``grammar`` proposal source."""

    name = "grammar"
    window_needed = 1

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        self._m = matcher
        self._vocab = vocab_size
        self._ids: list[int] = []  # output ids the matcher has consumed
        self._history: list[int] = []  # committed output (what the session observed)
        self._words = torch.zeros(((vocab_size + 31) // 32,), dtype=torch.int32)
        self._allowed: torch.Tensor | None = None  # the mask at `position`, once computed
        # At the last sync: its target, that target's length, the committed ids then.
        self._last: tuple[Sequence[int] | None, int, int] = (None, 0, 0)

    # --- the state ---------------------------------------------------------
    @property
    def position(self) -> int:
        """How many output ids the matcher has consumed."""
        return len(self._ids)

    @property
    def done(self) -> bool:
        """The grammar is complete and allows nothing but the end of the turn."""
        return bool(self._m.is_stopped())

    def sync(self, target: Sequence[int]) -> None:
        """Make the matcher's output `target`: roll back to the longest common
        prefix, then consume the rest. Only the ids past what is known to agree are
        compared (`_agreed`), so a step costs what changed, not the output's length."""
        ids = self._ids
        n = len(ids)
        k = min(self._agreed(target), n, len(target))
        if n > k and list(target[k:n]) != ids[k:]:
            k += common_prefix(ids[k:], target[k:])
            if not self._m.rollback(n - k):
                raise RuntimeError(f"grammar rollback of {n - k} ids failed: {self._error()}")
            del ids[k:]
            self._allowed = None
        for t in target[len(ids) :]:
            # One at a time: consume_tokens refuses an EOS once the grammar is
            # complete, where consume_token takes it (llguidance 1.9.1).
            if not self._m.consume_token(int(t)):
                raise RuntimeError(f"grammar refused id {int(t)}: {self._error()}")
            ids.append(int(t))
            self._allowed = None
        self._last = (target, len(target), len(self._history))

    def _agreed(self, target: Sequence[int]) -> int:
        """Leading ids of `target` the matcher's ids share for certain, without comparing:
        the output committed when it last synced (every target starts with the committed
        output, which never changes), or all of the last target when the same list comes
        back (the loop's output list only grows)."""
        last, length, committed = self._last
        return max(committed, length if target is last else 0)

    def _error(self) -> str:
        return _reason(self._m.get_error() or "no reason given")

    # --- TokenConstraint (the sampler) -------------------------------------
    def mask(self, logits: torch.Tensor, generated: Sequence[int]) -> torch.Tensor:
        """`logits` with -inf on every id the grammar forbids after `generated`."""
        self.sync(generated)
        allowed = self._allowed_ids(logits.shape[-1])
        return torch.where(allowed, logits, torch.tensor(-float("inf"), dtype=logits.dtype))

    def _allowed_ids(self, width: int) -> torch.Tensor:
        if self._allowed is None or self._allowed.shape[0] != width:
            words = self._words
            self._m.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * 4)
            bits = np.unpackbits(words.numpy().view(np.uint8), bitorder="little")
            if bits.shape[0] < width:
                bits = np.concatenate([bits, np.zeros(width - bits.shape[0], dtype=np.uint8)])
            self._allowed = torch.from_numpy(bits[:width]).view(torch.bool)
        return self._allowed

    # --- ProposalSource (the fill session) ----------------------------------
    def observe(self, ids: Sequence[int]) -> None:
        self._history.extend(int(i) for i in ids)

    def propose(self, view: TokenView) -> Proposal | None:
        """The ids the grammar forces after the committed output, if any."""
        self.sync(self._history)
        forced = self._m.compute_ff_tokens()
        return Proposal(tuple(forced), "assert", "grammar") if forced else None

    def admit(self, ids: Sequence[int]) -> int:
        """How many leading ids of `ids` the grammar accepts after the committed output."""
        self.sync(self._history)
        return int(self._m.validate_tokens(list(ids)))
