"""kimi: Moonshot's Kimi K2 and K3.

* kimi_k2: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:INDEX
  <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>``;
* kimi_k3: ``<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>`` then
  ``<|open|>argument key="K" type="string"<|sep|>V<|close|>argument<|sep|>`` per pair.
"""

from __future__ import annotations

from ffwd.templates.formats.markers import INDEX, TYPE
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

K2 = named_format("kimi_k2", Named(
    "<|tool_call_begin|>functions.", (":", INDEX, "<|tool_call_argument_begin|>"),
    "<|tool_call_end|>", section_open="<|tool_calls_section_begin|>",
    section_close="<|tool_calls_section_end|>"), models="Kimi K2, K2 Thinking")
K3 = named_format("kimi_k3", Named(
    '<|open|>call tool="', ('" index="', INDEX, '"<|sep|>'), "<|close|>call<|sep|>",
    section_open="<|open|>tools<|sep|>", section_close="<|close|>tools<|sep|>",
    kv=Kv('<|open|>argument key="', ('" type="', TYPE, '"<|sep|>'), "<|close|>argument<|sep|>",
          is_string=lambda kind: kind == "string")), models="Kimi K3")
