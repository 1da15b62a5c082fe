"""The body of OpenAI's Completions (``POST /v1/completions``), validated.

The same rules as `ffwd.serve.protocol`'s (strict types, finite numbers, the
shared sampling fields), plus the prompt: one prompt, as text or as token ids
(OpenAI's tokenized prompt, a list of integers). ``tools`` and ``tool_choice`` are
refused, not ignored: Completions writes text after a prompt, and tool calls are
Chat Completions'.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator
from pydantic.json_schema import JsonDict

from ffwd.serve.errors import bad_request
from ffwd.serve.protocol import (
    ONE,
    ONE_CHOICE,
    REFUSED,
    Int,
    SamplingFields,
    TopCount,
    json_integer,
)

# Each id's range is the model's to check (`ModelService`: the first id outside the
# vocabulary is named, below 0 or above it); the served document states it.
TokenId = Annotated[int, BeforeValidator(json_integer)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]
CHAT_ONLY: JsonDict = {"type": "null", "description": "not supported here: tool calls are "
                       "made on /v1/chat/completions; omit, or null"}


class CompletionRequest(SamplingFields):
    """``prompt`` is one prompt: text, or token ids (a list of integers, OpenAI's
    tokenized prompt), alone or as the only item of a list. More prompts are refused as
    ``n > 1`` is (`ONE_CHOICE`); ids outside the vocabulary are a 400 naming the first
    (`ModelService`, which knows the vocabulary)."""

    prompt: (Annotated[str, Field(min_length=1)] | TokenIds
             | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1,
                                                                          max_length=1)]
             | Annotated[list[TokenIds], Field(min_length=1, max_length=1)]) = Field(
        description="One prompt: a string, or its token ids (an array of integers); an array "
        f"of one string or of one array of token ids is the same. {ONE_CHOICE}.")
    echo: bool = False
    logprobs: TopCount | None = None
    suffix: str | None = Field(default=None, json_schema_extra=REFUSED)
    best_of: Int | None = Field(default=None, json_schema_extra=ONE)
    tools: Any = Field(default=None, json_schema_extra=CHAT_ONLY)  # refused (`check`)
    tool_choice: Any = Field(default=None, json_schema_extra=CHAT_ONLY)

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: object) -> object:
        """One prompt (see the class docstring); each refusal names what was sent."""
        if not isinstance(v, list):
            return v  # a string, or a type error naming what was sent
        if not v:
            raise ValueError("the prompt is empty: send a string or an array of token ids")
        ids = [json_integer(i) for i in v]
        if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return _token_ids(ids)
        if not all(isinstance(p, str | list) for p in v):
            raise ValueError("expected a string, an array of token ids (integers), or an "
                             "array of one string or one array of token ids")
        if len(v) > 1:
            raise ValueError(f"{len(v)} prompts are not supported: {ONE_CHOICE} (send one "
                             "prompt: a string or an array of token ids)")
        if isinstance(v[0], list):
            return [_token_ids([json_integer(i) for i in v[0]])]
        return v

    @property
    def prompt_text(self) -> str:
        """The prompt's text ("" for token ids)."""
        if isinstance(self.prompt, str):
            return self.prompt
        first = self.prompt[0]
        return first if isinstance(first, str) else ""

    @property
    def prompt_ids(self) -> tuple[int, ...] | None:
        """The prompt's token ids, when it was sent as ids (None for text)."""
        if isinstance(self.prompt, str):
            return None
        first = self.prompt[0]
        if isinstance(first, str):
            return None
        return tuple(first) if isinstance(first, list) else tuple(
            i for i in self.prompt if isinstance(i, int))

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    @property
    def logprob_count(self) -> int | None:
        return self.logprobs

    def check(self) -> None:
        """Parameters ffwd refuses rather than ignores, as 400s that name them."""
        for name in ("tools", "tool_choice"):
            if getattr(self, name) is not None:
                raise bad_request(f"{name} is not supported on /v1/completions, which writes "
                                  "text after a prompt: send tools to /v1/chat/completions",
                                  param=name, code="unsupported_parameter")
        if self.suffix:
            raise bad_request("suffix is not supported: ffwd has no fill-in-the-middle mode; "
                              "send the text before the gap as prompt", param="suffix",
                              code="unsupported_parameter")
        if self.best_of not in (None, 1):
            raise bad_request(f"best_of={self.best_of} is not supported: ffwd generates one "
                              "completion per request (best_of 1)", param="best_of",
                              code="unsupported_value")
        if self.echo and self.prompt_ids is not None:
            raise bad_request("echo with a token-id prompt is not supported: ffwd echoes the "
                              "prompt's text (send the prompt as text, or ask without echo)",
                              param="echo", code="unsupported_value")
        if self.echo and self.logprobs is not None:
            raise bad_request("echo with logprobs is not supported: ffwd does not score prompt "
                              "tokens (ask for logprobs without echo)", param="echo",
                              code="unsupported_value")


def _token_ids(ids: list[Any]) -> list[Any]:
    """`ids`, unless there are none."""
    if not ids:
        raise ValueError("the prompt is empty: send a string or an array of token ids")
    return ids
