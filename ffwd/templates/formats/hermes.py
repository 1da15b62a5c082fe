"""hermes: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

Qwen2.5, Qwen3, QwQ, Hermes 2/3, Granite 4, MiMo, Bielik, SmolLM-style models;
the builtin for models whose own template has no tools (the embedded SmolLM2
among them).
"""

from __future__ import annotations

from ffwd.templates.formats.jsoncall import JsonFraming
from ffwd.templates.formats.jsonformat import json_format

FORMAT = json_format(
    "hermes", JsonFraming(open="<tool_call>", close="</tool_call>"), builtin="hermes",
    models="Qwen2.5, Qwen3, QwQ, Hermes 2/3, Granite 4, MiMo-VL, Bielik, SmolLM")
