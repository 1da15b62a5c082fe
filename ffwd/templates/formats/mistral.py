"""mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, then EOS.

Mistral Nemo and the Mistral models of its generation (v3 tokenizers).
"""

from __future__ import annotations

from ffwd.templates.formats.jsoncall import JsonFraming
from ffwd.templates.formats.jsonformat import json_format

FORMAT = json_format(
    "mistral", JsonFraming(open="[TOOL_CALLS]", list_open="[", list_close="]", separator=","),
    builtin="mistral", models="Mistral Nemo, Mistral 7B v0.3")
