"""A reasoning template on the real `ModelService` (tiny model, the embedded model's
tokenizer, templates from llama.cpp's collection): the service says the model reasons,
a prompt that opens the block makes the reply reasoning through the real engine loop
(deltas, the result's reasoning and its count agree), the request's reasoning switch
reaches the template, and ``chat_template_kwargs`` cannot set what the server sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ffwd.config import FillConfig
from ffwd.engine.core.generate import drive
from ffwd.engine.hf import HFBackend
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.errors import APIError
from ffwd.serve.service import ModelService
from ffwd.templates.formats.base import ContentDelta, ReasoningDelta
from tests.engine.tiny_models import tiny_model
from tests.engine.tiny_service import tiny_service, tokenizer
from tests.unit._collection import need_models, templates

ASK = {"messages": [{"role": "user", "content": "Think, then answer: 2+2?"}]}


def reasoning_service(template: str) -> ModelService:
    need_models()
    tok = tokenizer()
    backend = HFBackend(tiny_model(vocab=len(tok)), eos_ids=frozenset({tok.eos_token_id}))
    return ModelService(backend, tok, "tiny", FillConfig(mode="off"),
                        chat_template=templates()[template])


def test_the_service_says_which_models_reason() -> None:
    assert reasoning_service("Qwen3.5-4B").model_info()["reasoning"] is True
    assert tiny_service().model_info()["reasoning"] is False


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), temperature=st.sampled_from([0.0, 0.7, 1.3]))
def test_a_reply_in_a_block_the_prompt_opened_is_reasoning(seed: int, temperature: float) -> None:
    svc = _qwen35()
    ready = svc.prepare(parse_chat({**ASK, "max_tokens": 12, "seed": seed,
                                    "temperature": temperature}))
    assert ready.prepared.thinking is not None and ready.prepared.thinking.opened
    events = list(drive(svc.backend, svc.steps(ready, svc.backend, lambda: False)))
    res = events[-1].result
    assert res is not None
    deltas = [d for e in events for d in e.deltas]
    said = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    assert said == res.reasoning
    if "</think>" not in res.text:  # a random model that never closes the block
        assert res.content == "" and not any(isinstance(d, ContentDelta) for d in deltas)
        assert res.reasoning_tokens == res.completion_tokens
        assert res.reasoning == res.text.strip()


_SERVICES: dict[str, ModelService] = {}


def _qwen35() -> ModelService:
    if "q" not in _SERVICES:
        _SERVICES["q"] = reasoning_service("Qwen3.5-4B")
    return _SERVICES["q"]


def test_switching_reasoning_off_reaches_the_template() -> None:
    svc = _qwen35()
    off = svc.prepare(parse_chat({**ASK, "reasoning_effort": "none"}))
    assert off.prepared.thinking is not None and not off.prepared.thinking.opened
    text = tokenizer().decode(off.prompt_ids)
    assert text.rstrip().endswith("</think>")
    kw = svc.prepare(parse_chat({**ASK, "chat_template_kwargs": {"enable_thinking": False}}))
    assert kw.prompt_ids == off.prompt_ids


def test_chat_template_kwargs_cannot_set_the_server_s_variables() -> None:
    svc = _qwen35()
    with pytest.raises(APIError) as err:
        svc.prepare(parse_chat({**ASK, "chat_template_kwargs": {"messages": []}}))
    assert err.value.status == 400 and "messages" in str(err.value)
