"""mistral_v11: ``[TOOL_CALLS]NAME[ARGS]{...}``, each call behind its own marker.

Mistral's v11+ tokenizers (Devstral, Magistral, Ministral 3); Mistral Small
3.2 writes the call's id too: ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}``
(`WITH_IDS`).
"""

from __future__ import annotations

from ffwd.templates.formats.markers import ID
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Named

FORMAT = named_format("mistral_v11", Named("[TOOL_CALLS]", "[ARGS]"),
                      models="Devstral, Magistral, Ministral 3")
WITH_IDS = named_format("mistral_v11_ids", Named("[TOOL_CALLS]", ("[CALL_ID]", ID, "[ARGS]")),
                        models="Mistral Small 3.2")
