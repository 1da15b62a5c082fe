"""A format derived from a template no module describes: its calls read back exactly,
whole and a character at a time, and markup it cannot cut is not guessed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ffwd.templates.formats import recognize
from ffwd.templates.render import render_chat
from tests.unit._collection import need_models, recognized

HEAD = ("{% for m in messages %}<|{{ m.role }}|>{% if m.content %}{{ m.content }}{% endif %}"
        "{% if m.tool_calls %}")
TAIL = "{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
# Shapes nobody listed: a JSON object per call under other keys, a list, a name then JSON.
UNLISTED = {
    "tagged": HEAD + "{% for c in m.tool_calls %}<<call>>{{ {'tool': c.function.name, "
              "'args': c.function.arguments} | tojson }}<</call>>{% endfor %}" + TAIL,
    "listed": HEAD + "CALLS: [{% for c in m.tool_calls %}{% if not loop.first %}, {% endif %}"
              "{{ {'fn': c.function.name, 'params': c.function.arguments} | tojson }}"
              "{% endfor %}]" + TAIL,
    "named": HEAD + "{% for c in m.tool_calls %}\n<invoke fn=\"{{ c.function.name }}\">\n"
             "{{ c.function.arguments | tojson }}\n</invoke>{% endfor %}" + TAIL,
}
KV = (HEAD + "{% for c in m.tool_calls %}<call {{ c.function.name }}>{% for k, v in "
      "c.function.arguments.items() %}<{{ k }}>{{ v }}</{{ k }}>{% endfor %}</call>{% endfor %}"
      + TAIL)
NAMES = st.sampled_from(["get_weather", "send_mail", "lookup.v2"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(
        "abcxyz_", min_size=1, max_size=5), inner, max_size=3), max_leaves=6)
ARGS = st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=6), VALUES, max_size=4)


def reply(template: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    user = [{"role": "user", "content": "hi"}]
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}
    prompt = render_chat(template, user)
    full = render_chat(template, [*user, message], add_generation_prompt=False)
    assert full.startswith(prompt)
    return full[len(prompt):].removesuffix("<|end|>")


@pytest.mark.parametrize("shape", sorted(UNLISTED))
@settings(max_examples=25, deadline=None)
@given(calls=st.lists(st.tuples(NAMES, ARGS), min_size=1, max_size=3))
def test_a_derived_format_reads_generated_calls_back(
        shape: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    template = UNLISTED[shape]
    found = recognize(template)
    assert found.how == "derived" and found.format is not None, found.how
    text = reply(template, calls)
    for pieces in ([text], list(text)):
        parser = found.format.new_parser()
        for piece in pieces:
            parser.feed(piece)
        parser.finish()
        assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == calls, text


def test_markup_it_cannot_cut_is_not_guessed() -> None:
    found = recognize(KV)
    assert found.format is None and "derived" in found.how


def test_templates_of_the_collection_that_no_module_describes_are_derived() -> None:
    need_models()
    derived = {k for k, v in recognized().items() if v.how == "derived"}
    assert {"GigaChat3-10B-A1.8B", "fireworks-ai-llama-3-firefunction-v2"} <= derived
