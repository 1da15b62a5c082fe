"""One loaded model behind the API: template, tokens, plan, grammar, the run.

`ModelService.prepare` runs on the event loop's thread pool and turns a
`GenerationRequest` into the engine's `Prepared` generation (prompt ids,
sampling, limits, fill settings, compiled tool rows, how calls are read, the
request's grammar), raising `APIError` for anything the client got wrong: a
schema llguidance cannot compile is a 400 naming the tool or
``response_format``. `steps` is the prepared run on the sequence the engine's
loop gave it (`ffwd.engine.core.generate.stream_steps`); the request (prompt and
output) then joins its tenant's earlier ones (`ffwd.fill.recall`).
`count_tokens` and `model_info` answer what the server asks without running
anything (`execute.Service`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ffwd.config import (
    DEFAULT_PROMPT_CACHE_BYTES,
    EngineConfig,
    FillConfig,
    OutputCap,
    SettingError,
    TokenLimits,
)
from ffwd.engine.backend import Backend, Context
from ffwd.engine.core.decode import SpanPolicy, Steps
from ffwd.engine.core.generate import Prepared, stream_steps
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.events import GenerationResult
from ffwd.engine.promise import loaded_promise
from ffwd.engine.sample.sampling import SamplingParams
from ffwd.engine.sample.text import Thinking, ToolCalls
from ffwd.fill import FillPlan
from ffwd.fill.recall import RecallConfig, RecallIndex
from ffwd.fill.spans import SharedAcceptance
from ffwd.grammar import Grammar, GrammarError, RequestGrammars
from ffwd.serve.errors import bad_request
from ffwd.serve.request import GenerationRequest
from ffwd.templates.choose import resolve_template
from ffwd.templates.formats import ToolFormat
from ffwd.templates.reasoning import opens, reasoning_markup, thinking_variables
from ffwd.templates.render import RESERVED, render_chat
from ffwd.templates.rows import CompiledTools, compile_tools, default_eos_ids
from ffwd.templates.tools import normalize_tools

if TYPE_CHECKING:
    from ffwd.models import ModelRef

__all__ = ["ModelService", "Ready", "load_service"]
COMPILE_CACHE_ENTRIES = 64  # distinct (tools, tool_choice) sets kept compiled


@dataclass(frozen=True)
class Ready:
    """A request made ready on this model: the engine's generation, the tenant whose
    earlier outputs it may copy and whose index its own output joins, and the cap the
    server put on its output limit, if it lowered it (reported with the result)."""

    prepared: Prepared
    tenant: str = ""
    cap: OutputCap | None = None

    @property
    def prompt_ids(self) -> list[int]:
        return self.prepared.prompt_ids


class ModelService:
    """One loaded model behind the API (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        model_id: str,
        fill: FillConfig,
        *,
        tool_format: str | None = None,
        chat_template: str | None = None,
        context_window: int | None = None,
        prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
        limits: TokenLimits | None = None,
        reasoning: str = "auto",
    ) -> None:
        self.backend = backend
        self.limits = limits or TokenLimits()
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.fill = fill
        resolved = resolve_template(tokenizer, tool_format, chat_template)
        self.template, self.format, self.format_note = (
            resolved.template, resolved.format, resolved.note)
        self.format_name = resolved.format_name
        # How the template writes reasoning (None: the model does not reason), and whether
        # to switch it on or off where a request does not say (--reasoning; auto: the
        # template's own default).
        self.reasoning = reasoning_markup(self.template, tokenizer)
        self.reasoning_default = {"on": True, "off": False}.get(reasoning)
        self.eos_ids = tuple(sorted(set(default_eos_ids(tokenizer)) | set(backend.eos_ids)))
        self.context_window = context_window or backend.context_window
        # Saved states need a checkpointable cache; without one only the live cache is reused.
        self.prompt_cache = PromptCache(prompt_cache_bytes if backend.can_checkpoint else 0)
        self._compile_cache: OrderedDict[str, CompiledTools] = OrderedDict()
        self._compile_lock = threading.Lock()
        self.grammars, self.grammar_unavailable = _request_grammars(
            tokenizer, self.template, self.format, backend.vocab_size, self.eos_ids
        )
        free = self.grammars.tools_unconstrained if self.grammars is not None else None
        if free is not None:
            self.format_note += f"; tool calls go unconstrained: {free}"
        # Earlier requests (prompt and output), per tenant: a model's own, forgotten with it.
        self.recall = RecallIndex(RecallConfig(
            fill.k, fill.max_span, fill.candidates, fill.recall_bytes))
        # How often copies are kept, by how far back they match: learned across requests.
        self.acceptance = SharedAcceptance()

    @property
    def reasoning_note(self) -> str:
        """What the start-up log says of the model's reasoning."""
        m = self.reasoning
        if m is None:
            return "reasoning: none (the chat template writes no reasoning)"
        how = "rendered from" if m.how == "rendered" else "tags named in"
        return f"reasoning: {m.start} ... {m.end} ({how} the chat template)"

    @property
    def context(self) -> Context:
        return self.backend.context

    @property
    def parallel(self) -> int:
        """How many requests decode together (``--parallel``)."""
        return len(self.context.sequences)

    def model_info(self) -> dict[str, Any]:
        grammar = self.grammars is not None
        return {"context_window": self.context_window, "tool_format": self.format_name,
                "grammar": grammar, "constrained_tool_calls": grammar and self.fill.grammar,
                "deterministic": loaded_promise(self.backend)[0],
                "reasoning": self.reasoning is not None,
                "max_tokens_limit": self.limits.limit, "strict_max_tokens": self.limits.strict,
                "vocab_size": self.backend.vocab_size}

    # --- preparing (thread pool) ------------------------------------------
    def prepare(self, req: GenerationRequest) -> Ready:
        """The request made ready to run, or an `APIError` naming what is wrong."""
        fill = self._fill(req)
        shown = self._shown_tools(req)
        ids, thinking = self._encode(req, shown)
        ids = self._check_prompt(ids, req.param("prompt" if req.kind == "text" else "messages"))
        choice = req.tool_choice if shown else "none"
        # A forced call needs its opening forced: the grammar does that when it is on;
        # without one, only the strict rows can, so they run even when fill is off.
        unforced = not (fill.grammar and self.grammars is not None)
        if shown and choice != "auto" and not fill.strict_rows and unforced:
            fill = replace(fill, mode="strict")
        compiled = self._compiled(shown, choice, req) if shown and fill.strict_rows else None
        calls = ToolCalls(
            self._format(), shown, compiled.rules if compiled is not None else {},
            max_calls=None if req.parallel_tool_calls else 1) if shown else None
        max_tokens, cap = self._max_tokens(req, len(ids))
        prepared = Prepared(
            ids, params=self._params(req), max_tokens=max_tokens,
            stop=req.stop, fill=fill,
            plan=compiled.plan if compiled is not None else FillPlan(eos=self.eos_ids),
            calls=calls, thinking=thinking,
            grammar=self._grammar(req, shown if fill.grammar else [], choice, thinking),
            logprobs=req.logprobs,
            copies=(self.recall.source(req.context.tenant),) if fill.recall else (),
            acceptance=self.acceptance,
        )
        return Ready(prepared, req.context.tenant, cap)

    def count_tokens(self, req: GenerationRequest) -> int:
        return len(self._encode(req, self._shown_tools(req))[0])

    def _format(self) -> ToolFormat:
        assert self.format is not None  # a model without one takes no tools (_shown_tools)
        return self.format

    def _shown_tools(self, req: GenerationRequest) -> list[dict[str, Any]]:
        """The request's tools as the template and the grammar read them; none under
        ``tool_choice: none`` (they are still checked)."""
        try:
            tools = normalize_tools(req.tools) if req.tools else []
        except ValueError as exc:
            raise bad_request(f"invalid tools: {exc}", param=req.param("tools"),
                              code="invalid_tools") from None
        if tools and self.format is None:
            raise bad_request(f"this model takes no tools: {self.format_note}",
                              param=req.param("tools"), code="invalid_tools")
        return tools if req.tool_choice != "none" else []

    def _encode(self, req: GenerationRequest, tools: list[dict[str, Any]]
                ) -> tuple[list[int], Thinking | None]:
        """The prompt's ids: a completion's text (or the ids it was sent as, each checked
        against the vocabulary), or the chat rendered with `tools`; and, for a chat with a
        reasoning template, how its reply's reasoning is read."""
        if req.kind == "text" and req.prompt_ids is not None:
            vocab = self.backend.vocab_size
            for i, tok in enumerate(req.prompt_ids):
                if not 0 <= tok < vocab:
                    raise bad_request(f"token id {tok} (prompt position {i}) is outside the "
                                      f"vocabulary: this model's ids are 0..{vocab - 1}",
                                      param=req.param("prompt"))
            return list(req.prompt_ids), None
        if req.kind == "text":
            return self._tokens(req.prompt), None
        try:
            text = render_chat(self.template, req.messages, tools or None, True,
                               self.tokenizer, **self._variables(req))
        except ValueError as exc:
            raise bad_request(f"cannot render these messages: {exc}",
                              param=req.param("messages")) from None
        thinking = (Thinking(self.reasoning, opens(self.reasoning, text))
                    if self.reasoning is not None else None)
        return self._tokens(text), thinking

    def _tokens(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def _variables(self, req: GenerationRequest) -> dict[str, Any]:
        """The template variables a request sets: its reasoning settings in the names the
        template reads, then its ``chat_template_kwargs`` (never the ones the server sets)."""
        asked = req.reasoning
        on = asked.on if asked is not None and asked.on is not None else self.reasoning_default
        out = thinking_variables(self.template, on, asked.effort if asked else None)
        taken = sorted(RESERVED & req.template_kwargs.keys())
        if taken:
            raise bad_request(f"chat_template_kwargs may not set {', '.join(taken)}: the "
                              "server sets them", param="chat_template_kwargs")
        return {**out, **req.template_kwargs}

    def _grammar(self, req: GenerationRequest, tools: list[dict[str, Any]],
                 choice: str | dict[str, Any], thinking: Thinking | None) -> Grammar | None:
        """The request's compiled grammar (cached), or None when nothing is constrained."""
        rf = req.response_format
        if self.grammars is None:
            if rf is not None and rf.get("type") != "text":
                raise bad_request(
                    f"response_format is not available for this model: "
                    f"{self.grammar_unavailable}", param=req.param("response_format"),
                )
            return None  # tool calls go unconstrained (said at start-up)
        try:
            # Reasoning before a constrained reply where the prompt opened the block (the
            # template has the model reason); elsewhere the reply is constrained from its
            # first id, as the template writes a call (an empty block included).
            reasoning = (None if thinking is None or not thinking.opened else
                         (thinking.markup.start, thinking.markup.end, True))
            return self.grammars.grammar(tools, choice if tools else "none",
                                         req.parallel_tool_calls, rf, reasoning)
        except GrammarError as exc:
            raise bad_request(str(exc), param=req.param(exc.param), code="invalid_schema") from None

    def _compiled(self, tools: list[dict[str, Any]], choice: str | dict[str, Any],
                  req: GenerationRequest) -> CompiledTools:
        """Compiled rows for these tools, cached: agents resend the same tools every turn."""
        key = json.dumps([tools, choice], sort_keys=True)
        with self._compile_lock:
            hit = self._compile_cache.get(key)
            if hit is not None:
                self._compile_cache.move_to_end(key)
                return hit
        try:
            compiled = compile_tools(
                self.tokenizer, self.template, tools, choice, self.eos_ids, fmt=self.format
            )
        except ValueError as exc:
            raise bad_request(f"invalid tools: {exc}", param=req.param("tools")) from None
        with self._compile_lock:
            self._compile_cache[key] = compiled
            while len(self._compile_cache) > COMPILE_CACHE_ENTRIES:
                self._compile_cache.popitem(last=False)
        return compiled

    def _fill(self, req: GenerationRequest) -> FillConfig:
        try:
            return self.fill.for_request(req.fill)
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

    def _max_tokens(self, req: GenerationRequest,
                    prompt_len: int) -> tuple[int, OutputCap | None]:
        """The request's output limit and its cap (`TokenLimits.bound`); over the server's
        limit under --strict-max-tokens it is a 400."""
        limit = self.limits.limit
        if self.limits.refuses(req.max_tokens):
            param = req.param("max_tokens")
            raise bad_request(
                f"{param}={req.max_tokens} is more than this server allows: at most {limit} "
                "tokens per request (the operator sets it with --max-tokens-limit, and "
                "refuses more with --strict-max-tokens)",
                param=param, code="max_tokens_too_large",
            )
        return self.limits.bound(req.max_tokens, self.context_window - prompt_len)

    def _params(self, req: GenerationRequest) -> SamplingParams:
        vocab = self.backend.vocab_size
        bad = [i for i in req.sampling.logit_bias if i >= vocab]
        if bad:
            raise bad_request(
                f"logit_bias names token id {bad[0]}, but the vocabulary has {vocab} ids "
                f"(0..{vocab - 1})", param=req.param("logit_bias"),
            )
        return req.sampling

    # --- running (the engine's loop) -------------------------------------------
    def prompt(self, ready: Ready) -> list[int]:
        return ready.prompt_ids

    def steps(self, ready: Ready, seq: Backend, cancelled: Callable[[], bool],
              policy: SpanPolicy | None = None) -> Steps[None]:
        """The run on `seq` (verify spans sized by `policy`, by default the backend's cost
        curve); once its result is made, the request (its prompt, then its output) joins
        the tenant's earlier ones (`ffwd.fill.recall`)."""
        prep = ready.prepared

        def finish(result: GenerationResult) -> None:  # before the client has it
            result.cap = ready.cap
            self.recall.add(ready.tenant, [*prep.prompt_ids, *result.token_ids])

        return stream_steps(seq, self.tokenizer, prep, cancelled=cancelled, policy=policy,
                            done=finish)


def load_service(
    model: str | ModelRef,
    engine: EngineConfig,
    fill: FillConfig,
    *,
    tool_format: str | None = None,
    chat_template: str | None = None,
    prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
    limits: TokenLimits | None = None,
    on_step: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
    reasoning: str = "auto",
) -> ModelService:
    """Load `model` (a name `models.resolve_model` accepts, or what it resolved) and wrap it
    in a ModelService.

    `on_step` is called after each of the three loading steps (for a progress bar);
    `progress` hears what a first load's cost measurement is doing; `reasoning` is the
    server's default for requests that do not say (``on``, ``off``, ``auto``).
    """
    import gc

    from ffwd.models import ModelRef, load_backend, load_tokenizer, resolve_model

    step = on_step or (lambda name: None)
    ref = model if isinstance(model, ModelRef) else resolve_model(model)
    tokenizer = load_tokenizer(ref)
    step("tokenizer")
    backend = load_backend(ref, **asdict(engine), tokenizer=tokenizer, progress=progress)
    step("weights")
    service = ModelService(
        backend, tokenizer, ref.name, fill, tool_format=tool_format, chat_template=chat_template,
        prompt_cache_bytes=prompt_cache_bytes, limits=limits, reasoning=reasoning,
    )
    step("service")
    # The loaded model is permanent: keep the collector from rescanning it in every
    # full collection (one cost ~140 ms in the middle of a request's compile).
    gc.collect()
    gc.freeze()
    return service


def _request_grammars(
    tokenizer: Any, template: str, fmt: ToolFormat | None, vocab_size: int,
    eos_ids: Sequence[int],
) -> tuple[RequestGrammars | None, str]:
    """The model's grammar builder, or None and why (llguidance needs a fast tokenizer)."""
    try:
        return RequestGrammars(tokenizer, template, fmt, vocab_size, eos_ids), ""
    except (ValueError, TypeError, AttributeError) as exc:
        return None, f"llguidance cannot read this tokenizer ({exc})"
