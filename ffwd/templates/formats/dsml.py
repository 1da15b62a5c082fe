"""dsml: DeepSeek's markup language, V3.2 (``function_calls``) and V4 (``tool_calls``)::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

``string="false"`` marks a value written as JSON.
"""

from __future__ import annotations

from ffwd.templates.formats.markers import TYPE
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

PAIRS = Kv('<｜DSML｜parameter name="', ('" string="', TYPE, '">'), "</｜DSML｜parameter>\n",
           is_string=lambda flag: flag == "true")


def _spec(section: str) -> Named:
    return Named('<｜DSML｜invoke name="', '">\n', "</｜DSML｜invoke>\n",
                 section_open=f"<｜DSML｜{section}>\n", section_close=f"</｜DSML｜{section}>",
                 kv=PAIRS)


FORMAT = named_format("dsml", _spec("function_calls"), models="DeepSeek V3.2")
V4 = named_format("dsml_v4", _spec("tool_calls"), models="DeepSeek V4")
