"""qwen_xml: Qwen3-Coder / Qwen3.5 style XML tool calls::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are raw text, typed by the tool's schema when read back
(`ffwd.templates.formats.values`).
"""

from __future__ import annotations

from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

SPEC = Named("<tool_call>\n<function=", ">\n", "</function>\n</tool_call>",
             kv=Kv("<parameter=", ">\n", "\n</parameter>\n"))
FORMAT = named_format("qwen_xml", SPEC, builtin="qwen_xml",
                      models="Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, StepFun 3.5")
