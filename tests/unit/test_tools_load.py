"""`tools.load`: the load tool's agent conversations, without a server."""

from __future__ import annotations

from tools import load


def test_a_conversation_grows_by_the_reply_and_its_tool_results() -> None:
    start = [{"role": "user", "content": "Flights from Oslo?"}]
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    after = load.next_messages(start, {"role": "assistant", "content": None,
                                       "tool_calls": [call], "refusal": None}, "Oslo", 0)
    assert after[:1] == start and after[1] == {"role": "assistant", "content": None,
                                               "tool_calls": [call]}
    assert after[2]["role"] == "tool" and after[2]["tool_call_id"] == "call_1"
    assert after[2]["content"] == load.tool_result("Oslo", 0)
    answered = load.next_messages(after, {"role": "assistant", "content": "Sunny."}, "Oslo", 1)
    assert answered[-1]["role"] == "user" and answered[-2]["content"] == "Sunny."
