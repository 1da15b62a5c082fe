"""minimax: MiniMax M2 and M3 (and MiniCPM 5's close relative).

* minimax_m2: ``<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="K">V
  </parameter>\\n</invoke>\\n</minimax:tool_call>``;
* minimax_m3: every tag behind ``]<]minimax[>[``, each key a tag of its own
  (``<city>Paris</city>``);
* minicpm5: ``<function name="NAME"><param name="K">V</param></function>`` (MiniCPM 5).
"""

from __future__ import annotations

from ffwd.templates.formats.markers import KEY
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Kv, Named

M = "]<]minimax[>["
M2 = named_format("minimax_m2", Named(
    '<invoke name="', '">\n', "</invoke>\n", section_open="<minimax:tool_call>\n",
    section_close="</minimax:tool_call>",
    kv=Kv('<parameter name="', '">', "</parameter>\n")), models="MiniMax M2")
M3 = named_format("minimax_m3", Named(
    f'{M}<invoke name="', '">', f"{M}</invoke>\n", section_open=f"{M}<tool_call>\n",
    section_close=f"{M}</tool_call>", kv=Kv(f"{M}<", ">", (f"{M}</", KEY, ">"))),
    models="MiniMax M3")
MINICPM5 = named_format("minicpm5", Named(
    '<function name="', '">', "</function>\n",
    kv=Kv('<param name="', '">', "</param>")), models="MiniCPM 5")
