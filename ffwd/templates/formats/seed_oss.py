"""seed_oss: ``<seed:tool_call>\\n<function=NAME>\\n<parameter=K>V</parameter>\\n</function>
\\n</seed:tool_call>`` (ByteDance Seed-OSS)."""

from __future__ import annotations

from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

FORMAT = named_format("seed_oss", Named(
    "<seed:tool_call>\n<function=", ">\n", "</function>\n</seed:tool_call>",
    kv=Kv("<parameter=", ">", "</parameter>\n")), models="Seed-OSS")
