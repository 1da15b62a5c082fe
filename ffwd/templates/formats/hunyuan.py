"""hunyuan: GLM's pairs in Hunyuan's tags: ``<tool_calls:opensource><tool_call:opensource>NAME
<tool_sep:opensource><arg_key:opensource>K</arg_key:opensource><arg_value:opensource>V
</arg_value:opensource></tool_call:opensource></tool_calls:opensource>`` (Hunyuan 3)."""

from __future__ import annotations

from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

FORMAT = named_format("hunyuan", Named(
    "<tool_call:opensource>", "<tool_sep:opensource>\n", "</tool_call:opensource>\n",
    section_open="<tool_calls:opensource>\n", section_close="</tool_calls:opensource>",
    kv=Kv("<arg_key:opensource>", "</arg_key:opensource>\n<arg_value:opensource>",
          "</arg_value:opensource>\n")), models="Hunyuan 3")
