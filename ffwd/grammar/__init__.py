"""Constrained decoding on llguidance: guaranteed tool calls and structured outputs.

A request's grammar is compiled from the tool-call format (its markup read off
the chat template's own renderings, `skeleton`), the request's ``tools`` and
``tool_choice`` (``required``/named: the whole turn is calls; ``auto``: lazy,
free text until the call opens), ``parallel_tool_calls`` and
``response_format`` (`build`). It reaches the decode loop through one object,
`GrammarConstraint` (`matcher`), which is both

1. a token mask for the sampler chain (`ffwd.engine.sample.sampling.TokenConstraint`):
   every id outside the grammar gets -inf before sampling, so every sampled
   id keeps the output valid; and
2. a `ProposalSource` named ``grammar`` (origin ``grammar``, policy
   ``assert``) for `ffwd.fill.FillSession`: the ids the grammar forces
   (the rest of a name once unique, required keys, ``": "``, determined
   enum values, closing braces and markup) are fast-forwarded. Strict rows
   are asked first; the grammar also bounds every other proposal (``admit``).

Entry point: ``RequestGrammars(tokenizer, template, fmt, vocab_size,
eos_ids).for_request(tools, tool_choice, parallel=True, response_format=None)
-> GrammarConstraint | None``; a request the grammar cannot be built from
raises `GrammarError` (``param`` names the field).
"""

from ffwd.grammar.matcher import Grammar, GrammarConstraint, GrammarError
from ffwd.grammar.request import RequestGrammars

__all__ = ["Grammar", "GrammarConstraint", "GrammarError", "RequestGrammars"]
