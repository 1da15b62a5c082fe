"""The decode engine: model backends, sampling, the fill-aware decode loop, the text layer.

`generate`
    ``stream_generate(backend, tokenizer, prepared, *, cancelled=None,
    policy=None)`` runs one `Prepared` generation and yields a `TokenEvent` per
    emitted id; the last event (no token of its own) carries the
    `GenerationResult`. ``generate(backend, tokenizer, prompt_ids, params=None,
    **settings) -> GenerationResult`` is the one-call form.
`events`
    ``TokenEvent(id, origin, logprob, top, token, raw, text, deltas, result)``
    and ``GenerationResult``: the one event type, from the loop to the wire.
`loop`
    ``generate_step(backend, sampler, *, max_tokens, session=None, policy=None,
    trace=None, check_cache=False, logprobs=None)`` yields the loop's
    ``TokenEvent``s (id, origin, logprob); span policies ``cost_policy(curve)``,
    ``fixed_policy(probe)``, ``default_policy(backend)``.
`text`
    ``OutputText`` (ids to text, stop strings, tool-call deltas; the context
    that gates template rows), ``ToolCalls``, ``StopMatcher``.
`sampling`
    ``SamplingParams``, the processors ``apply_*``, ``Sampler`` /
    ``make_sampler(params, prompt_ids, constraint=None)`` with a per-request
    ``TokenConstraint`` (a grammar's mask), ``verify_span``.
`backend`
    The ``Backend`` protocol (prefill, forward/append, rewind, checkpoint and
    restore, save/load state, cost curve), implemented by ``llamacpp`` and
    ``hf``; ``ffwd.models.load_backend`` picks and loads one.
`cost`
    ``CostCurve``: the milliseconds of a forward of m ids, kept current by the loop.
"""
