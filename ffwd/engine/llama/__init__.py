"""The llama.cpp binding and its context: the library on this machine (`native`, `probe`),
the context of ``--parallel N`` sequences and its one forward (`context`), each
sequence's cache (`sequence`), the KV cache's settings (`kv`), the attention paths
(`attention`) and the thread count under shared cores (`threads`)."""
