"""One generation request, whatever API it came in through.

Each dialect module (`ffwd.serve.dialects`) validates its own request body and
translates it into a `GenerationRequest`; `ModelService.prepare` turns that
into prompt ids, a fill plan and a grammar, and the run's events go back to
the dialect to be written in its wire format. Nothing here is specific to one
API, except `params`: how the dialect spells each field, so that an error
names the field the client sent (``input`` for the Responses API's messages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ffwd.engine.sample.sampling import SamplingParams


@dataclass(frozen=True)
class Context:
    """What the server knows of a request besides its body: its id (the ``x-request-id``
    it is answered and logged under, `ffwd.serve.access`), its tenant (whose earlier
    outputs and stored responses it may see, `ffwd.serve.middleware.tenant`), and the
    served model's name (what a response reports as its ``model``)."""

    request_id: str = ""
    tenant: str = ""
    model: str = "default"


@dataclass(frozen=True)
class Reasoning:
    """A request's reasoning settings, in any API's words: `on` (think or not; None:
    the server's default), `effort` (``low``/``medium``/``high``, Responses'
    ``reasoning.effort`` and Chat's ``reasoning_effort``), `budget` (Anthropic's
    ``budget_tokens``: at most this many ids of reasoning)."""

    on: bool | None = None
    effort: str | None = None
    budget: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate (see the module docstring).

    `messages` are as the chat template reads them (content a string, assistant
    `tool_calls` in OpenAI's shape); `tools` are OpenAI function tools and
    `tool_choice` is ``auto``, ``none``, ``required`` or
    ``{"type": "function", "function": {"name": ...}}``; `parallel_tool_calls`
    says whether more than one call may be made (each dialect decides it by its
    API's rules). `response_format` is OpenAI's (``json_object`` or
    ``json_schema``). `fill` holds the request's
    own ``ffwd`` settings, checked by `ffwd.config.FillConfig.for_request`.
    `logprobs` is the number of alternatives per token (0: the token's own
    only; None: no log-probabilities). `reasoning` is what the client asked of the
    model's reasoning (None: the server's default, ``--reasoning``);
    `template_kwargs` are further variables for the chat template
    (``chat_template_kwargs``, as llama.cpp's server and vLLM take them; they win
    over what `reasoning` sets). A ``text`` request's prompt is `prompt`,
    or `prompt_ids` when the client sent token ids (used as they are, once the
    model has checked that it knows them).
    """

    id: str
    kind: Literal["chat", "text"]
    messages: list[dict[str, Any]] = field(default_factory=list)
    prompt: str = ""
    prompt_ids: tuple[int, ...] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "none"
    parallel_tool_calls: bool = True
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    response_format: dict[str, Any] | None = None
    fill: dict[str, Any] | None = None
    logprobs: int | None = None
    stream: bool = False
    reasoning: Reasoning | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    context: Context = field(default_factory=Context)

    def param(self, name: str) -> str:
        """The dialect's own name for a field (``messages`` -> ``input``, ...)."""
        return self.params.get(name, name)
