"""The loop and its scheduling: one thread steps every sequence of a context.

`scheduler` (the engine's loop: admit, plan, forward, settle, deliver), `batch` (what
one step forwards), `slots` and `prompt_cache` (which sequence a run takes and what its
cache starts from), `decode` (one sequence's decode, step by step) and `generate` (its
text-level run, the `Prepared` generation, the library's `generate`).
"""
