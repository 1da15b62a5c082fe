"""glm: ``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>``.

GLM-4.5, 4.6, 4.7 and the templates that copied it (Spark 2.5, Laguna, Ling 3),
with or without the newlines.
"""

from __future__ import annotations

from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

FORMAT = named_format("glm", Named(
    "<tool_call>", "\n", "</tool_call>",
    kv=Kv("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n")),
    models="GLM-4.5, 4.6, 4.7, Spark 2.5, Laguna, Ling 3")
