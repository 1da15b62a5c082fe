"""deepseek: the tool-call tokens of DeepSeek V3 and R1.

* deepseek_v31 (V3.1): ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
  <｜tool▁call▁end｜><｜tool▁calls▁end｜>``;
* deepseek_r1 (R1, V3): ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` then the
  arguments in a ``json`` code block.
"""

from __future__ import annotations

from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Named

OPEN, CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
V31 = named_format("deepseek_v31", Named(
    "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", OPEN, CLOSE),
    models="DeepSeek V3.1")
R1 = named_format("deepseek_r1", Named(
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n", "\n```<｜tool▁call▁end｜>",
    OPEN, CLOSE), models="DeepSeek R1, V3")
