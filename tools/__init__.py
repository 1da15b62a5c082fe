"""Developer instruments, run from a checkout's root (``python -m tools.NAME``); not
part of the installed package.

* `acceptance`: echo's acceptance replayed over greedy outputs (sets the span priors).
* `conformance`: every promise of the default path on generated requests (needs
  ``ffwd[dev]``: hypothesis, jsonschema).
* `fill_overhead`: what `FillSession.push` + `commit` cost per token.
* `grammar_overhead`, `grammar_validity`: the grammar's cost per token, and how
  often a forced tool choice returns a valid call, on BFCL.
* `load`: a bounded load run against a live server (one process or replicas).
"""
