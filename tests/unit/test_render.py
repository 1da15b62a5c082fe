"""Rendering chat templates, normalising tools, choosing a template."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from ffwd.templates.builtin import builtin_template
from ffwd.templates.choose import resolve_template
from ffwd.templates.formats import FORMATS, get_format
from ffwd.templates.render import render_chat
from ffwd.templates.tools import normalize_tools
from tests.unit._tokenizers import tokenizer

WEATHER = {
    "name": "get_weather",
    "description": "Weather now.",
    "parameters": {
        "type": "dict",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
USER = {"role": "user", "content": "What is the weather in Paris?"}


def call(arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": arguments},
            }
        ],
    }


# --- normalize_tools -------------------------------------------------------------


def test_openai_and_bare_tools_normalise_alike() -> None:
    bare = normalize_tools([WEATHER])
    wrapped = normalize_tools([{"type": "function", "function": WEATHER}])
    assert bare == wrapped
    assert bare[0]["type"] == "function"
    assert bare[0]["function"]["parameters"]["type"] == "object"
    assert WEATHER["parameters"]["type"] == "dict", "the caller's tools are not modified"


def test_nested_dict_types_and_missing_parts_are_filled() -> None:
    tool = {
        "name": "f",
        "parameters": {
            "properties": {
                "o": {
                    "type": "dict",
                    "properties": {"x": {"type": "array", "items": {"type": "dict"}}},
                }
            }
        },
    }
    params = normalize_tools([tool])[0]["function"]["parameters"]
    assert params["type"] == "object"
    assert params["properties"]["o"]["type"] == "object"
    assert params["properties"]["o"]["properties"]["x"]["items"] == {
        "type": "object",
        "properties": {},
    }
    assert normalize_tools([{"name": "g"}])[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {},
    }


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("get_weather", "expected a list"),
        ([{"description": "no name"}], r"tools\[0\]: 'name'"),
        ([{"type": "retrieval", "function": WEATHER}], "not supported"),
        (
            [
                {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"a": {"type": "float"}}},
                }
            ],
            r"tool 'f'.*'float' is not a JSON Schema type",
        ),
        (
            [{"name": "f", "parameters": {"type": "object", "properties": {}, "required": ["a"]}}],
            r"tool 'f'.*required \['a'\]",
        ),
        ([{"name": "f", "parameters": {"type": "string"}}], r"tool 'f'.*expected 'object'"),
        ([WEATHER, WEATHER], "more than one tool"),
    ],
)
def test_bad_tools_name_the_tool_and_the_problem(tools: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        normalize_tools(tools)


# --- render_chat -----------------------------------------------------------------


BUILTIN = [f for f in FORMATS if get_format(f).builtin is not None]


@pytest.mark.parametrize("fmt", BUILTIN)
def test_arguments_as_json_text_or_dict_render_the_same(fmt: str) -> None:
    tpl = get_format(fmt).builtin_template
    as_text = render_chat(tpl, [USER, call('{"city": "Paris"}')], [WEATHER])
    as_dict = render_chat(tpl, [USER, call({"city": "Paris"})], [WEATHER])
    assert as_text == as_dict
    assert "Paris" in as_text and "get_weather" in as_text


def test_text_parts_render_like_a_string() -> None:
    tpl = builtin_template("hermes")
    parts = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is "},
            {"type": "text", "text": "the weather in Paris?"},
        ],
    }
    assert render_chat(tpl, [parts]) == render_chat(tpl, [USER])
    with pytest.raises(ValueError, match="'image_url' is not supported"):
        render_chat(tpl, [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}])


def test_tool_results_and_generation_prompt() -> None:
    tpl = builtin_template("hermes")
    text = render_chat(
        tpl, [USER, call({"city": "Paris"}), {"role": "tool", "content": "18C"}], [WEATHER]
    )
    assert "<tool_response>\n18C\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert not render_chat(tpl, [USER], add_generation_prompt=False).endswith("assistant\n")


def test_special_tokens_and_extra_variables_reach_the_template() -> None:
    tpl = "{{ bos_token }}|{{ eos_token }}|{{ flavour }}|{{ tools | length }}"
    out = render_chat(tpl, [USER], [WEATHER], tokenizer=tokenizer("default"), flavour="x")
    assert out == "<|im_start|>|<|im_end|>|x|1"


def test_generation_tags_render_their_body() -> None:
    tpl = "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    assert render_chat(tpl, [USER]) == "[What is the weather in Paris?]"


def test_text_joined_with_null_is_text_as_in_llama_cpp() -> None:
    # gpt-oss writes ``", // default: " + param.default``; BFCL's tools carry
    # ``"default": null``, and null description keys are dropped.
    tpl = "{{ 'a' + x }}|{{ y + 'b' }}|{{ tools[0].function.description is defined }}"
    tools = [{"type": "function", "function": {"name": "f", "description": None}}]
    assert render_chat(tpl, [], tools, False, None, x=None) == "a|b|False"
    with pytest.raises(ValueError, match="unsupported operand"):
        render_chat("{{ 1 + none }}", [], None, False, None)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ raise_exception('only user turns') }}", "chat template raised: only user turns"),
        ("{% for %}", "does not compile"),
        ("{{ messages[5].content }}", "chat template"),
    ],
)
def test_a_template_that_fails_is_a_value_error(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_chat(template, [USER])


def test_bad_messages_are_named() -> None:
    with pytest.raises(
        ValueError, match=r"messages\[1\].tool_calls\[0\].arguments: not valid JSON"
    ):
        render_chat(builtin_template("hermes"), [USER, call("{city: Paris}")])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        render_chat(builtin_template("hermes"), [{"content": "no role"}])


def test_llama3_builtin_refuses_two_calls_in_one_turn() -> None:
    two = call({"city": "Paris"})
    two["tool_calls"] = two["tool_calls"] * 2
    with pytest.raises(ValueError, match="one tool call"):
        render_chat(builtin_template("llama3_json"), [USER, two])


# --- resolve_template -------------------------------------------------------------


class FakeTokenizer:
    def __init__(self, template: str | None) -> None:
        self.chat_template = template

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def test_smollm2_gets_the_hermes_builtin() -> None:
    resolved = resolve_template(tokenizer("default"))
    assert resolved.format_name == "hermes"
    assert resolved.template == builtin_template("hermes")
    assert "tools" not in (tokenizer("default").chat_template or ""), (
        "its own template has no tools"
    )


def test_gemma_base_gets_hermes_calls_in_gemma_turns() -> None:
    resolved = resolve_template(tokenizer("gemma3"))
    assert resolved.format_name == "hermes"
    text = render_chat(resolved.template, [USER], [WEATHER], tokenizer=tokenizer("gemma3"))
    assert text.startswith("<bos><start_of_turn>user\n")
    assert text.endswith("<start_of_turn>model\n")


@pytest.mark.parametrize("fmt", BUILTIN)
def test_an_explicit_format_picks_its_builtin(fmt: str) -> None:
    resolved = resolve_template(tokenizer("default"), fmt)
    assert (resolved.template, resolved.format_name) == (builtin_template(fmt), fmt)


def test_a_model_template_with_tools_is_used_and_recognised() -> None:
    own = get_format("qwen_xml").builtin_template.replace("You are", "You, model, are")
    resolved = resolve_template(FakeTokenizer(own))
    assert (resolved.template, resolved.format_name) == (own, "qwen_xml")
    assert "rendered from the chat template" in resolved.note
    # Asking for another format falls back to that format's builtin.
    assert resolve_template(FakeTokenizer(own), "hermes").format_name == "hermes"
    plain = "{% for m in messages %}{{ m.content }}{% endfor %}"
    resolved = resolve_template(FakeTokenizer(plain))
    assert (resolved.template, resolved.format_name) == (builtin_template("hermes"), "hermes")


def test_a_template_whose_calls_no_format_reads_serves_plain_chat() -> None:
    own = ("{% for t in tools %}{{ t.function.name }}{% endfor %}{% for m in messages %}"
           "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }}!{% endfor %}"
           "{{ m.content }}{% endfor %}")
    resolved = resolve_template(FakeTokenizer(own))
    assert resolved.format is None and resolved.template == own
    assert "--tool-format" in resolved.note
    # --chat-template stands for the model's own
    assert resolve_template(tokenizer("default"), None, own).template == own


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError, match="expected one of hermes"):
        resolve_template(FakeTokenizer(None), "xml")


def test_the_renderer_does_not_import_the_formats() -> None:
    """The formats render templates to recognise them: the renderer is below them."""
    code = (
        "import sys, ffwd.templates.render as r; r.render_chat('x', []); "
        "assert 'ffwd.templates.formats' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
