"""Glue between a validated request and the engine: template, tokens, plan, parse.

`ModelService.prepare_*` runs on the event loop's thread pool and turns a
request into a `Prepared` (prompt ids, sampling, fill settings, compiled tool
rows, the request's grammar), raising `APIError` for anything the client got
wrong: a schema llguidance cannot compile is a 400 naming the tool or
``response_format``. `run` executes on
the scheduler's single worker thread: it streams the engine's text through
the format's incremental tool-call parser and emits `events`.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ffwd.config import EngineConfig, FillConfig, SettingError
from ffwd.engine.generate import GenerationResult, stream_generate
from ffwd.engine.sampling import SamplingParams
from ffwd.fill import FillPlan
from ffwd.grammar import Grammar, GrammarError, RequestGrammars
from ffwd.serve.errors import bad_request
from ffwd.serve.events import ContentDelta, Event, Finished, ToolCallDelta, ToolCallOut, Usage
from ffwd.serve.prompt_cache import PromptCache
from ffwd.serve.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ResponseFormat,
    SamplingFields,
)
from ffwd.serve.tokens import TokenText
from ffwd.templates import formats
from ffwd.templates.formats.base import ToolCallContext, ToolParser
from ffwd.templates.render import encode_chat, normalize_tools, resolve_template
from ffwd.templates.rows import CompiledTools, compile_tools, default_eos_ids

Emit = Callable[[Event], None]
DEFAULT_PROMPT_CACHE_BYTES = 1 << 30
DEFAULT_CONTEXT_WINDOW = 8192  # when the model's config does not say
COMPILE_CACHE_ENTRIES = 64  # distinct (tools, tool_choice) sets kept compiled


@dataclass(frozen=True)
class Prepared:
    kind: str  # "chat" | "text"
    prompt_ids: list[int]
    params: SamplingParams
    max_tokens: int
    stop: list[str]
    fill: FillConfig
    plan: FillPlan | None
    compiled: CompiledTools | None  # tool rows and the format, when tools are on
    tools: list[dict[str, Any]]
    single_call: bool  # parallel_tool_calls=false: stop after the first call
    logprobs: int | None = None  # alternatives per token (0: none); None: no logprobs
    grammar: Grammar | None = None  # tool calls and/or response_format, when constrained


class ModelService:
    """One loaded model behind the API (see the module docstring)."""

    def __init__(
        self,
        backend: Any,
        tokenizer: Any,
        model_id: str,
        fill: FillConfig,
        *,
        tool_format: str | None = None,
        context_window: int | None = None,
        prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.fill = fill
        self.template, self.format_name = resolve_template(tokenizer, tool_format)
        self.eos_ids = tuple(sorted(set(default_eos_ids(tokenizer)) | set(backend.eos_ids)))
        cfg = getattr(getattr(backend, "model", None), "config", None)
        self.context_window = context_window or int(
            getattr(backend, "context_window", 0)  # llama.cpp: the context it allocated
            or getattr(cfg, "max_position_embeddings", 0) or DEFAULT_CONTEXT_WINDOW
        )
        # Saved states need a checkpointable cache; without one only the live cache is reused.
        can_save = getattr(backend, "can_checkpoint", False) and hasattr(backend, "save_state")
        self.prompt_cache = PromptCache(prompt_cache_bytes if can_save else 0)
        self._compile_cache: OrderedDict[str, CompiledTools] = OrderedDict()
        self._compile_lock = threading.Lock()
        self.token_text = TokenText(tokenizer)
        self.grammars, self.grammar_unavailable = _request_grammars(
            tokenizer, self.template, self.format_name, int(backend.vocab_size), self.eos_ids
        )

    @property
    def forward_calls(self) -> int:
        return int(self.backend.forward_calls)

    # --- preparing (thread pool) ------------------------------------------
    def prepare_chat(self, req: ChatCompletionRequest) -> Prepared:
        fill = self._fill(req)
        choice = req.tool_choice_value
        try:
            tools = normalize_tools(req.tools) if req.tools else []
        except ValueError as exc:
            msg = f"invalid tools: {exc}"
            raise bad_request(msg, param="tools", code="invalid_tools") from None
        shown = tools if choice != "none" else []
        messages = [m.as_template_message() for m in req.messages]
        try:
            ids = encode_chat(self.tokenizer, self.template, messages, shown or None)
        except ValueError as exc:
            raise bad_request(f"cannot render these messages: {exc}", param="messages") from None
        ids = self._check_prompt(ids, "messages")
        compiled: CompiledTools | None = None
        if shown:
            # A forced call goes through the strict tier even when fill is off.
            if choice != "auto" and not fill.strict:
                fill = replace(fill, fill="strict")
            if fill.strict:
                compiled = self._compiled(shown, choice)
        plan = compiled.plan if compiled is not None else FillPlan(eos=self.eos_ids)
        constrained = shown if fill.grammar else []
        grammar = self._grammar(constrained, choice, req.parallel_tool_calls, req.response_format)
        return Prepared(
            "chat", ids, self._params(req), self._max_tokens(req.token_limit, len(ids)),
            req.stop_list, fill, plan, compiled, shown,
            single_call=bool(shown) and not req.parallel_tool_calls, logprobs=req.logprob_count,
            grammar=grammar,
        )

    def _grammar(
        self, tools: list[dict[str, Any]], choice: str | dict[str, Any], parallel: bool,
        response_format: ResponseFormat | None,
    ) -> Grammar | None:
        """The request's compiled grammar (cached), or None when nothing is constrained."""
        rf = response_format.model_dump(by_alias=True) if response_format is not None else None
        if self.grammars is None:
            if rf is not None and rf["type"] != "text":
                raise bad_request(
                    f"response_format is not available for this model: "
                    f"{self.grammar_unavailable}", param="response_format",
                )
            return None  # tool calls go unconstrained (said at start-up)
        try:
            return self.grammars.grammar(tools, choice if tools else "none", parallel, rf)
        except GrammarError as exc:
            raise bad_request(str(exc), param=exc.param, code="invalid_schema") from None

    def _compiled(self, tools: list[dict[str, Any]], choice: str | dict[str, Any]) -> CompiledTools:
        """Compiled rows for these tools, cached: agents resend the same tools every turn."""
        key = json.dumps([tools, choice], sort_keys=True)
        with self._compile_lock:
            hit = self._compile_cache.get(key)
            if hit is not None:
                self._compile_cache.move_to_end(key)
                return hit
        try:
            compiled = compile_tools(
                self.tokenizer, self.template, tools, choice, self.eos_ids, fmt=self.format_name
            )
        except ValueError as exc:
            raise bad_request(f"invalid tools: {exc}", param="tools") from None
        with self._compile_lock:
            self._compile_cache[key] = compiled
            while len(self._compile_cache) > COMPILE_CACHE_ENTRIES:
                self._compile_cache.popitem(last=False)
        return compiled

    def prepare_completion(self, req: CompletionRequest) -> Prepared:
        fill = self._fill(req)
        ids = self._check_prompt(
            [int(i) for i in self.tokenizer.encode(req.prompt_text, add_special_tokens=False)],
            "prompt",
        )
        return Prepared(
            "text", ids, self._params(req), self._max_tokens(req.token_limit, len(ids)),
            req.stop_list, fill, FillPlan(eos=self.eos_ids), None, [], single_call=False,
            logprobs=req.logprob_count,
            grammar=self._grammar([], "none", True, req.response_format),
        )

    def _fill(self, req: SamplingFields) -> FillConfig:
        overrides = req.ffwd.model_dump(exclude_none=True) if req.ffwd else None
        try:
            return self.fill.for_request(overrides)
        except SettingError as exc:
            raise bad_request(f"invalid ffwd settings: {exc}", param=exc.name) from None

    def _check_prompt(self, ids: list[int], param: str) -> list[int]:
        if not ids:
            raise bad_request("the prompt is empty", param=param)
        if len(ids) >= self.context_window:
            raise bad_request(
                f"the prompt is {len(ids)} tokens, and the model's context window is "
                f"{self.context_window} tokens (room must remain for at least one new token)",
                param=param, code="context_length_exceeded",
            )
        return ids

    def _max_tokens(self, requested: int | None, prompt_len: int) -> int:
        room = self.context_window - prompt_len
        return min(requested, room) if requested else room

    def _params(self, req: SamplingFields) -> SamplingParams:
        vocab = self.backend.vocab_size
        bias = req.logit_bias_ids
        bad = [i for i in bias if i >= vocab]
        if bad:
            raise bad_request(
                f"logit_bias names token id {bad[0]}, but the vocabulary has {vocab} ids "
                f"(0..{vocab - 1})", param="logit_bias",
            )
        return SamplingParams(
            temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, min_p=req.min_p,
            repetition_penalty=req.repetition_penalty, presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty, logit_bias=bias, seed=req.seed,
        )

    # --- running (worker thread) --------------------------------------------
    def reset(self) -> None:
        self.backend.reset()

    def run(self, prep: Prepared, emit: Emit, cancelled: Callable[[], bool]) -> None:
        compiled = prep.compiled
        # Calls are parsed whenever tools are shown, with or without strict rows.
        fmt = formats.get_format(self.format_name)
        parser = _Calls(fmt.new_parser(prep.tools), emit) if prep.tools else None
        context: ToolCallContext | None = compiled.new_context() if compiled else None

        def stop_now() -> bool:
            return cancelled() or (prep.single_call and parser is not None and parser.done)

        self.prompt_cache.select(self.backend, prep.prompt_ids)
        result: GenerationResult | None = None
        for chunk in stream_generate(
            self.backend, self.tokenizer, prep.prompt_ids, prep.params,
            max_tokens=prep.max_tokens, stop=prep.stop, plan=prep.plan, fill=prep.fill,
            strict_context=context, cancelled=stop_now, logprobs=prep.logprobs,
            constraint=prep.grammar.new_constraint() if prep.grammar is not None else None,
        ):
            if chunk.logprob is not None and chunk.token_id is not None:
                emit(self.token_text.logprob(chunk.token_id, chunk.logprob))
            if chunk.text:
                if parser is not None:
                    parser.feed(chunk.text)
                else:
                    emit(ContentDelta(chunk.text))
            if chunk.result is not None:
                result = chunk.result
        if result is None:
            return
        # Cut off inside a call the grammar guaranteed: drop it rather than return markup.
        cut = prep.grammar is not None and result.finish_reason == "length"
        content, calls = (parser.finish(cut) if parser is not None else (result.text, []))
        finish = str(result.finish_reason)
        if cancelled():
            finish = "cancelled"  # the client is gone: counted, never sent
        elif calls:
            finish = "tool_calls"
        elif finish == "cancelled":
            finish = "stop"  # parallel_tool_calls=false ended it after the first call
        emit(Finished(
            finish, content if (content or not calls) else None, tuple(calls),
            Usage(result.prompt_tokens, result.completion_tokens, result.cached_tokens),
            _ffwd_block(prep, result),
        ))


def load_service(
    model: str,
    engine: EngineConfig,
    fill: FillConfig,
    *,
    tool_format: str | None = None,
    prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
    on_step: Callable[[str], None] | None = None,
) -> ModelService:
    """Load `model` (a name `models.resolve_model` accepts) and wrap it in a ModelService.

    `on_step` is called after each of the three loading steps (for a progress bar).
    """
    import gc

    from ffwd.models import load_backend, load_tokenizer, resolve_model

    step = on_step or (lambda name: None)
    ref = resolve_model(model)
    tokenizer = load_tokenizer(ref)
    step("tokenizer")
    backend = load_backend(ref, **asdict(engine), tokenizer=tokenizer)
    step("weights")
    service = ModelService(
        backend, tokenizer, ref.name, fill, tool_format=tool_format,
        prompt_cache_bytes=prompt_cache_bytes,
    )
    step("service")
    # The loaded model is permanent: keep the collector from rescanning it in every
    # full collection (one cost ~140 ms in the middle of a request's compile).
    gc.collect()
    gc.freeze()
    return service


class _Calls:
    """Feeds text to a format parser and forwards its deltas as API events."""

    def __init__(self, parser: ToolParser, emit: Emit) -> None:
        self.parser = parser
        self.emit = emit
        self.ids: dict[int, str] = {}
        self.content: list[str] = []

    @property
    def done(self) -> bool:
        return bool(self.parser.calls)

    def feed(self, text: str) -> None:
        self._forward(self.parser.feed(text))

    def finish(self, cut: bool = False) -> tuple[str, list[ToolCallOut]]:
        self._forward(self.parser.finish(cut))
        calls = [
            ToolCallOut(self.ids.get(i) or _call_id(), c.name, c.arguments)
            for i, c in enumerate(self.parser.calls)
        ]
        return "".join(self.content), calls

    def _forward(self, deltas: Sequence[formats.Delta]) -> None:
        for d in deltas:
            if isinstance(d, formats.ContentDelta):
                if d.text:
                    self.content.append(d.text)
                    self.emit(d)
                continue
            first = d.index not in self.ids
            if first:
                self.ids[d.index] = _call_id()
            self.emit(ToolCallDelta(
                d.index,
                id=self.ids[d.index] if first else None,
                name=(d.name or "") if first else None,
                arguments=d.arguments,
            ))


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _ffwd_block(prep: Prepared, result: GenerationResult) -> dict[str, Any]:
    injected: dict[str, int] = {}
    for origin in result.origins:
        if origin != "sampled":
            injected[origin] = injected.get(origin, 0) + 1
    return {
        "fill": prep.fill.fill,
        "grammar": prep.grammar is not None,
        "stats": result.stats.as_dict(),
        "forward_calls": result.forward_calls,
        "injected_by_origin": injected,
        "seconds": round(result.seconds, 4),
        "prefill_seconds": round(result.prefill_seconds, 4),
    }


def _request_grammars(
    tokenizer: Any, template: str, fmt: str, vocab_size: int, eos_ids: Sequence[int]
) -> tuple[RequestGrammars | None, str]:
    """The model's grammar builder, or None and why (llguidance needs a fast tokenizer)."""
    try:
        return RequestGrammars(tokenizer, template, fmt, vocab_size, eos_ids), ""
    except (ValueError, TypeError, AttributeError) as exc:
        return None, f"llguidance cannot read this tokenizer ({exc})"
