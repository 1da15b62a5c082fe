"""The decode engine: one loop steps every sequence of a model.

The folder shows the request's way down:

`core/` the loop and its scheduling
    ``scheduler.Engine``: one thread admits runs, plans one step from every
    running sequence (``batch.plan_step``), forwards it and settles each
    sequence on its rows; ``slots``/``prompt_cache``: which sequence and which
    cache a run starts from; ``decode.generate_step``: one sequence's decode
    (sample, push, append, verify, rewind) as a generator of events and the
    ``Forward``s it needs; ``generate``: the ``Prepared`` generation, its text
    layer and stops (``stream_steps``), run alone by ``drive``
    (``stream_generate``, ``generate`` for the library).
`sample/` sampling and text
    ``sampling.Sampler`` and ``verify_span``, the logits ``processors``, the
    text layer ``text.OutputText`` (ids to text, stops, tool-call deltas).
`cost/` what a forward costs
    the measured ``surface``, a sequence's share of a ``batched`` step, the
    ``measure``-ment at load.
`llama/` the llama.cpp binding and its context
    ``context.LlamaContext`` (the model, ``--parallel N`` sequences, one
    ``llama_decode`` per step), ``sequence.LlamaSequence`` (one sequence's
    cache: the ``Backend``), ``kv``, ``attention``, ``threads``, and the library
    on this machine (``native``, ``probe``).

Beside them: ``backend`` (the ``Backend`` and ``Context`` protocols), ``hf`` (the
transformers backend, a context of one), ``events`` (``TokenEvent`` and
``GenerationResult``, the one event type from the loop to the wire) and
``promise`` (what greedy determinism a loaded model gives).
"""
