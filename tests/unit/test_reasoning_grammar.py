"""Under ``tool_choice: required`` a reasoning model reasons first, then calls: for each
reasoning template of llama.cpp's collection whose format the grammar constrains, the
turn the template renders (reasoning, then a call) is accepted whole by the request's
grammar on SmolLM2's vocabulary, whether the prompt opened the block or the model opens
it, and the same turn calling a tool nobody offered is refused after the reasoning."""

from __future__ import annotations

from functools import cache

import pytest

from ffwd.grammar import RequestGrammars
from ffwd.grammar.request import UNCHECKED
from ffwd.templates.formats.probe import PROBE_CALLS, PROBE_TOOLS, assistant_message
from ffwd.templates.reasoning import opens
from ffwd.templates.rows import default_eos_ids
from tests.unit._collection import recognized, templates
from tests.unit._tokenizers import tokenizer
from tests.unit.test_reasoning import markups, rendered_turn

THOUGHT = "The user wants the weather, so I call the tool."


@cache
def cases() -> list[str]:
    out = []
    for name, markup in markups().items():
        found = recognized().get(name)
        if found is None or found.format is None or found.format.name in UNCHECKED:
            continue
        turn, _ = rendered_turn(templates()[name], _message())
        if THOUGHT in turn and markup.how == "rendered":
            out.append(name)
    return sorted(out)


def _message() -> dict[str, object]:
    """Reasoning and one call, without the call id a client would send (a model writes
    its calls without one; Solar's template writes the id it is given)."""
    message = assistant_message(PROBE_CALLS[:1])
    for call in message["tool_calls"]:
        del call["id"]
    return {**message, "reasoning_content": THOUGHT}


@pytest.mark.parametrize("name", cases() or ["(no collection)"])
def test_reasoning_then_the_call_is_what_the_grammar_admits(name: str) -> None:
    if name not in templates():
        pytest.skip("llama.cpp's template collection is absent")
    tok, template, markup = tokenizer("default"), templates()[name], markups()[name]
    fmt = recognized()[name].format
    assert fmt is not None
    turn, prompt = rendered_turn(template, _message())
    grammars = RequestGrammars(tok, template, fmt, len(tok), default_eos_ids(tok))
    if grammars.tools_unconstrained is not None:
        pytest.skip(f"{name}: {grammars.tools_unconstrained}")
    reasoning = (markup.start, markup.end, opens(markup, prompt))
    ids = list(tok.encode(turn, add_special_tokens=False))
    constraint = grammars.for_request(PROBE_TOOLS, "required", parallel=False,
                                      reasoning=reasoning)
    assert constraint is not None
    n = constraint.admit(ids)
    constraint.sync(ids[:n])
    # The whole turn, or all of it up to where the grammar is complete (the end of turn).
    assert n == len(ids) or constraint.done, (turn, tok.decode(ids[:n]))
    assert THOUGHT in tok.decode(ids[:n])
    wrong = list(tok.encode(turn.replace("get_weather", "get_wether"), add_special_tokens=False))
    refusing = grammars.for_request(PROBE_TOOLS, "required", parallel=False,
                                    reasoning=reasoning)
    assert refusing is not None
    thought_end = len(tok.encode(turn[: turn.find(THOUGHT) + len(THOUGHT)],
                                 add_special_tokens=False))
    assert thought_end <= refusing.admit(wrong) < len(wrong), turn
