"""ffwd: an LLM inference server that fast-forwards the tokens it already knows."""

from ffwd.config.engine import openmp_defaults

# Before torch or llama.cpp load their OpenMP runtime (see ffwd.config.engine).
openmp_defaults()

__version__ = "0.1.0"
