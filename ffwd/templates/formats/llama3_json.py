"""llama3_json: ``{"name": ..., "parameters": {...}}`` as the whole assistant message.

Llama 3.1/3.2/3.3 style. A message whose first non-blank character is ``{``
is read as a call; one call per message (``;`` separated calls are accepted).
"""

from __future__ import annotations

from ffwd.templates.formats.jsoncall import JsonFraming
from ffwd.templates.formats.jsonformat import json_format

FORMAT = json_format("llama3_json", JsonFraming(open="", separator=";"), builtin="llama3_json",
                     parallel=False, models="Llama 3.1, 3.2, 3.3")
