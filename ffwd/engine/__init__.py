"""The decode engine: a model backend, sampling, and the fill-aware decode loop.

Public API
----------
``ffwd.models.load_backend(spec="default", *, backend="auto", dtype="auto",
device="auto", prefill_chunk=512, threads=0, context=0, llamacpp_log=False,
tokenizer=None) -> LlamaCppBackend | HFBackend`` and ``ffwd.models.load_tokenizer``.

`backend.Backend` (protocol), implemented by `llamacpp.LlamaCppBackend(path, *,
n_ctx=0, threads=0, n_batch=512, log=False)` and `hf.HFBackend(model, *,
eos_ids=None, prefill_chunk=512)`:
    ``prefill(ids) -> int`` (ids reused from the cache), ``forward(ids) ->
    (len, vocab)`` logits, ``append(ids) -> (vocab,)`` last-row logits,
    ``rewind(n)``, ``can_rewind``, ``rewindable``, ``checkpoint()`` /
    ``restore(cp)``, ``can_checkpoint``, ``max_append``, ``cache_len``,
    ``cached_ids``, ``last_logits``, ``vocab_size``, ``eos_ids``,
    ``forward_calls``, ``reset()``.

`sampling`:
    ``SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty,
    presence_penalty, frequency_penalty, logit_bias, seed)``, the processors
    ``apply_*``, ``Sampler`` / ``make_sampler(params, prompt_ids, constraint=None)``
    (``TokenConstraint``: a per-request mask such as a grammar), and
    ``verify_span(logits, proposed, sampler, generated=()) -> SpanVerdict``.

`generate`:
    ``stream_generate(backend, tokenizer, prompt_ids, params=None, *,
    max_tokens=256, stop=(), plan=None, fill=None, strict_context=None,
    constraint=None, cancelled=None, policy=None)`` yields ``StreamChunk(text, token_id, origin,
    finish_reason, result)``; ``generate(...) -> GenerationResult`` with the
    same arguments.

`loop`:
    ``generate_step(backend, sampler, *, max_tokens, session=None,
    policy=None, trace=None, check_cache=False)`` yields
    ``TokenEvent(token_id, origin)``; span policies ``cost_policy(curve)``,
    ``fixed_policy(probe)``, ``default_policy(backend)``.

`cost`:
    ``CostCurve`` (ms per forward of m ids, kept current by the loop),
    ``measure(backend)``, ``load_or_measure(backend, path)``.

`text`:
    ``Detokenizer``, ``StopMatcher``.
"""
