"""What clients read (issue 32), through the official SDKs (openai, anthropic) on the real
`ModelService` (tiny random model, the embedded model's tokenizer and template): the
prompt's usage in an Anthropic stream's message_start, tokenized prompts on
/v1/completions, a json_schema format without a schema, browser origins (no SDK: a
browser is the client, as it asks), and schema errors in one sentence."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI

from ffwd.config import FillConfig
from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service, tokenizer

GREEDY: dict[str, Any] = {"model": "default", "temperature": 0}
PROMPT = "The three primary colours are red, yellow and"
ASK = [{"role": "user", "content": "Tell me about the three primary colours, briefly."}]
ONE_CHOICE = "ffwd returns exactly one choice per request"


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app(tiny_service(FillConfig(mode="echo"), capped=False, context=8192),
                      cors_origins=["https://app.example.com"])


def prompt_ids(text: str = PROMPT) -> list[int]:
    return list(tokenizer().encode(text, add_special_tokens=False))


# --- 1. the prompt's usage in message_start ------------------------------------------
def test_messages_stream_reports_the_prompts_usage_at_its_start(
        claude: anthropic.Anthropic) -> None:
    kw: Any = {"model": "default", "max_tokens": 8, "messages": ASK,
               "extra_body": {"temperature": 0}}  # the SDK no longer names it
    cold = claude.messages.create(**kw)  # computes the prompt; the next two read it cached
    warm = claude.messages.create(**kw)
    with claude.messages.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = events[0]
    assert start.type == "message_start"
    # What Anthropic's API reports before the first token: the prompt's input and cache
    # reads (Claude Code's context meter reads them here), no output yet.
    u = start.message.usage
    prompt = cold.usage.input_tokens + cold.usage.cache_read_input_tokens
    assert u.input_tokens + (u.cache_read_input_tokens or 0) == prompt > 0
    assert u.cache_read_input_tokens and u.cache_read_input_tokens > 0 and u.output_tokens == 0
    assert u.cache_creation_input_tokens == 0
    # The whole reply under the same cache says the same, the stream's end agrees with
    # its start, and message_delta brings the output count.
    fields = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    for name in fields:
        assert getattr(u, name) == getattr(final.usage, name) == getattr(warm.usage, name)
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.output_tokens == final.usage.output_tokens == warm.usage.output_tokens
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in warm.content]


# --- 2. tokenized prompts on /v1/completions -----------------------------------------
def test_a_list_of_token_ids_is_one_prompt(oai: OpenAI) -> None:
    ids = prompt_ids()
    as_text = oai.completions.create(prompt=PROMPT, max_tokens=6, **GREEDY)
    for prompt in (ids, [ids]):  # OpenAI's tokenized prompt, alone or as the only prompt
        whole = oai.completions.create(prompt=prompt, max_tokens=6, **GREEDY)
        assert whole.choices[0].text == as_text.choices[0].text
        assert whole.usage is not None and whole.usage.prompt_tokens == len(ids)
        chunks = list(oai.completions.create(prompt=prompt, max_tokens=6, stream=True,
                                             stream_options={"include_usage": True},
                                             **GREEDY))
        assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == len(ids)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ids=st.lists(st.integers(0, 49151), min_size=1, max_size=12),
       bad=st.lists(st.integers(49152, 2**40) | st.integers(-(2**40), -1), min_size=1,
                    max_size=3), at=st.integers(0, 12))
def test_any_ids_in_the_vocabulary_are_read_and_the_first_outside_is_named(
        oai: OpenAI, ids: list[int], bad: list[int], at: int) -> None:
    reply = oai.completions.create(prompt=ids, max_tokens=1, **GREEDY)
    assert reply.usage is not None and reply.usage.prompt_tokens == len(ids)
    where = min(at, len(ids))
    sent = [*ids[:where], *bad, *ids[where:]]
    with pytest.raises(openai.BadRequestError) as err:
        oai.completions.create(prompt=sent, max_tokens=1, **GREEDY)
    assert f"token id {bad[0]} (prompt position {where}) is outside the vocabulary" in str(
        err.value)


def test_more_than_one_prompt_is_refused_as_n_is(oai: OpenAI) -> None:
    ids = prompt_ids()
    said = []
    for kw in ({"prompt": [PROMPT, PROMPT]}, {"prompt": [ids, ids]},
               {"prompt": PROMPT, "n": 2}):
        with pytest.raises(openai.BadRequestError) as err:
            oai.completions.create(max_tokens=1, **kw, **GREEDY)
        said.append(str(err.value))
    assert all(ONE_CHOICE in s for s in said), said
    assert "2 prompts are not supported" in said[0] and "2 prompts are not supported" in said[1]


# --- 3. json_schema without schema ---------------------------------------------------
def closing_bias() -> dict[str, int]:
    """Favour the ids that end strings and objects, so a random model finishes its JSON."""
    tok = tokenizer()
    return {str(tok.convert_tokens_to_ids(t)): 20 for t in ('"', "}", '"}', '":', '""')}


def test_a_json_schema_format_without_a_schema_is_any_json_object(oai: OpenAI) -> None:
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "anything"}}
    for seed in range(3):
        kw: Any = {"model": "default", "messages": ASK, "max_tokens": 48, "seed": seed,
                   "temperature": 1.0, "response_format": fmt, "logit_bias": closing_bias()}
        whole = oai.chat.completions.create(**kw)
        text = whole.choices[0].message.content or ""
        assert whole.choices[0].finish_reason == "stop", text
        assert isinstance(json.loads(text), dict), text
        assert (whole.model_extra or {})["ffwd"]["grammar"] is True
        streamed = oai.chat.completions.create(**kw, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text
    # Responses: text.format without a schema. (No logit_bias there: the random model may
    # run out of tokens, but what it wrote is an object as far as it went.)
    for seed in range(3):
        r = oai.responses.create(model="default", input="Give me JSON.", max_output_tokens=24,
                                 text={"format": {"type": "json_schema", "name": "anything"}},
                                 temperature=1.0, extra_body={"seed": seed})
        assert r.status in ("completed", "incomplete") and r.output_text.startswith("{")
        if r.status == "completed":
            assert isinstance(json.loads(r.output_text), dict)


# --- 4. browser origins -------------------------------------------------------------
def test_a_browser_page_is_answered_by_its_origin(http: TestClient) -> None:
    """What a browser does for a page's fetch with a JSON body: a preflight, then the
    request; the page reads the reply only with Access-Control-Allow-Origin."""
    asks = {"Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}
    body = {"model": "default", "messages": ASK, "max_tokens": 2}
    for origin in ("http://localhost:5173", "https://app.example.com"):
        pre = http.options("/v1/chat/completions", headers={"Origin": origin, **asks})
        assert pre.status_code == 204
        assert pre.headers["access-control-allow-origin"] == origin
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert pre.headers["access-control-allow-headers"] == "authorization, content-type"
        r = http.post("/v1/chat/completions", json=body, headers={"Origin": origin})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        assert "x-request-id" in r.headers["access-control-expose-headers"]
    for origin in ("https://evil.example", "null"):
        pre = http.options("/v1/chat/completions", headers={"Origin": origin, **asks})
        r = http.post("/v1/chat/completions", json=body, headers={"Origin": origin})
        for answer in (pre, r):
            assert answer.status_code == 403
            assert not any(k.startswith("access-control-") for k in answer.headers)
    # The playground: the page and its calls come from the server itself.
    page = http.get("/")
    assert page.status_code == 200 and page.headers["referrer-policy"] == "same-origin"
    own = http.post("/v1/chat/completions", json=body, headers={"Origin": "http://testserver"})
    assert own.status_code == 200


# --- 5. schema errors -----------------------------------------------------------------
BAD = {"type": "object", "properties": {"q": {"type": "string", "format": "no-such-format"}},
       "required": ["q"]}
WHY = "its parameters schema cannot be enforced: Unknown format: no-such-format"
GRAMMAR_TEXT = ("start:", "%json", "x-guidance", "\n")


def test_a_schema_error_is_one_sentence_naming_the_tool(oai: OpenAI,
                                                       claude: anthropic.Anthropic) -> None:
    with pytest.raises(openai.BadRequestError) as chat:
        oai.chat.completions.create(
            model="default", messages=ASK, max_tokens=4, tool_choice="required",
            tools=[{"type": "function", "function": {"name": "lookup", "parameters": BAD}}])
    with pytest.raises(openai.BadRequestError) as responses:
        oai.responses.create(model="default", input="hi", max_output_tokens=4,
                             tool_choice="required",
                             tools=[{"type": "function", "name": "lookup", "parameters": BAD,
                                     "strict": False}])
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(model="default", max_tokens=4, messages=ASK,
                               tools=[{"name": "lookup", "input_schema": BAD}],
                               tool_choice={"type": "any"})
    for err in (chat.value, responses.value, messages.value):
        body: Any = err.body
        error = body.get("error", body)
        assert error["message"] == f"tool 'lookup': {WHY}", error
        assert error["param"] == "tools" and error["code"] == "invalid_schema"
        assert not any(t in error["message"] for t in GRAMMAR_TEXT)
    with pytest.raises(openai.BadRequestError) as fmt:
        oai.chat.completions.create(
            model="default", messages=ASK, max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}})
    body: Any = fmt.value.body
    assert body["message"] == ("response_format: its JSON schema cannot be enforced: "
                               "Unsatisfiable schema: minimum (5) is greater than maximum (1)")
