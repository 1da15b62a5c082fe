"""functionary / solar: a name between markers, then JSON arguments.

* functionary: ``<function=NAME>{...}</function>`` (Functionary v3.1, Llama 3.1's
  ``<function=`` style);
* solar: ``<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}
  <|tool_call:end|><|calls|>`` (Solar Open).
"""

from __future__ import annotations

from ffwd.templates.formats.markers import ID
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Named

FUNCTIONARY = named_format("functionary", Named("<function=", ">", "</function>"),
                           models="Functionary v3.1")
SOLAR = named_format("solar", Named(
    ("<|tool_call:begin|>", ID, "<|tool_call:name|>"), "<|tool_call:args|>", "<|tool_call:end|>",
    section_open="<|tool_calls|>", section_close="<|calls|>"), models="Solar Open")
