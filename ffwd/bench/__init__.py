"""What ``ffwd bench`` and ``ffwd replay`` run, and the measures README tells users to run.

* `run`: ``ffwd bench``, every system on the same items, interleaved;
  `report`, `latency` (the prefill rows), `targets` and `fidelity` turn its
  records into numbers, verdicts and the report; `contention` measures decode
  beside other work; `environment` records the machine and each system's
  build; ``python -m ffwd.bench.readme`` writes docs/performance.md's tables.
* `workloads`: the items (BFCL tool calls, echo, prose, agent conversations,
  long prompts for prefill).
* `systems`: what is compared (ffwd over HTTP in either mode, llama.cpp's
  server built like the engine, transformers' ``generate``), how each is named
  and how its server is started.
* `replay`: ``ffwd replay``, the model-free measure of the strict tier.
* `agreement`: ``python -m ffwd.bench.agreement``, whether an engine's batched
  and one-id forwards pick the same greedy ids.

Developer instruments (load runs, micro-benchmarks, conformance) live in the
repository's ``tools/``, outside the installed package.
"""
