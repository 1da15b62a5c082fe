"""ffwd: an LLM inference server that fast-forwards the tokens it already knows."""

__version__ = "0.1.0"
