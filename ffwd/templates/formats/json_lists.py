"""JSON call objects in a list or a section of their own (name and arguments inside).

* apriel: ``<tool_calls>[{"name": ..., "arguments": ...}, ...]</tool_calls>`` (Apriel 1.5, 1.6);
* nemotron: ``<TOOLCALL>[...]</TOOLCALL>`` (Nemotron Nano v2);
* granite: ``<|tool_call|>[...]`` (Granite 3.x);
* command_r: ``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": ...}]
  <|END_ACTION|>`` (Command R7B, Command A);
* minimax_m1: ``<tool_calls>`` one object a line ``</tool_calls>`` (MiniMax M1);
* gigachat: ``<|function_call|>{"name": ..., "arguments": ...}`` (GigaChat 3.1).
"""

from __future__ import annotations

from ffwd.templates.formats.jsoncall import JsonFraming
from ffwd.templates.formats.jsonformat import json_format

APRIEL = json_format("apriel", JsonFraming(
    open="<tool_calls>", list_open="[", list_close="]", separator=",", end="</tool_calls>"),
    models="Apriel 1.5, 1.6")
NEMOTRON = json_format("nemotron", JsonFraming(
    open="<TOOLCALL>", list_open="[", list_close="]", separator=",", end="</TOOLCALL>"),
    models="Nemotron Nano v2")
GRANITE = json_format("granite", JsonFraming(
    open="<|tool_call|>", list_open="[", list_close="]", separator=","), models="Granite 3.x")
COMMAND_R = json_format("command_r", JsonFraming(
    open="<|START_ACTION|>", list_open="[", list_close="]", separator=",", end="<|END_ACTION|>",
    name_keys=("tool_name",), args_keys=("parameters",)), models="Command R7B, Command A")
MINIMAX_M1 = json_format("minimax_m1", JsonFraming(open="<tool_calls>", end="</tool_calls>"),
                         models="MiniMax M1")
GIGACHAT = json_format("gigachat", JsonFraming(open="<|function_call|>"), parallel=False,
                       models="GigaChat 3.1")
