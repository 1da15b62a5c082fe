"""The prefix-affinity routing policy (hashing, the table, the ranking) and its Ray router."""

from __future__ import annotations

import doctest
from typing import Any

from ffwd.deploy import router
from ffwd.deploy.router import (
    Held,
    PrefixTable,
    chain_hashes,
    prompt_blocks,
    rank,
    resumer,
)
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.request import GenerationRequest

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 4}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def chat(*messages: dict[str, Any], **kw: Any) -> GenerationRequest:
    return parse_chat({"messages": list(messages), **kw})


def turns(topic: str, n: int) -> list[GenerationRequest]:
    """n successive requests of one conversation (each resends the one before)."""
    msgs: list[dict[str, Any]] = [SYSTEM]
    out = []
    for i in range(n):
        msgs = [*msgs, {"role": "user", "content": f"{topic}, question {i}: tell me more."}]
        out.append(chat(*msgs))
        msgs = [*msgs, {"role": "assistant", "content": f"About {topic}: answer {i}. " * 6}]
    return out


def test_docstring_examples() -> None:
    assert doctest.testmod(router).failed == 0


def test_prompt_blocks_grow_with_the_conversation() -> None:
    b1, b2, b3 = (prompt_blocks(r) for r in turns("Lisbon", 3))
    assert b2[:len(b1)] == b1 and b3[:len(b2)] == b2
    # Content parts and a plain string render the same; shown tools lead.
    parts = chat({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    assert prompt_blocks(parts) == prompt_blocks(chat({"role": "user", "content": "hi"}))
    with_tools = prompt_blocks(chat({"role": "user", "content": "hi"}, tools=TOOLS))
    assert with_tools[-1:] == prompt_blocks(parts) and "get_weather" in with_tools[0]
    hidden = chat({"role": "user", "content": "hi"}, tools=TOOLS, tool_choice="none")
    assert prompt_blocks(hidden) == prompt_blocks(parts)
    assert prompt_blocks(GenerationRequest("r", "text", prompt="Once")) == []  # no whole block


def test_short_messages_still_tell_conversations_apart() -> None:
    """Two conversations that differ only in a short last message differ in a block."""
    a, b = (prompt_blocks(turns(t, 1)[0]) for t in ("Lisbon", "Oslo"))
    assert a[:-1] == b[:-1] and a[-1] != b[-1]


def test_chain_hashes_agree_exactly_on_shared_prefixes() -> None:
    a, b = chain_hashes(["x", "y", "z"]), chain_hashes(["x", "y", "w", "z"])
    assert a[:2] == b[:2] and a[2] not in b
    assert chain_hashes(["a", "c"])[1] != chain_hashes(["b", "c"])[1]


def test_table_marks_where_prompts_ended_and_evicts_lru() -> None:
    t = PrefixTable(max_blocks=6)
    p1 = [1, 2, 3]
    t.record("a", p1)
    assert t.match("a", [1, 2, 3, 4, 5]) == Held(3, 3)
    assert t.match("a", [1, 2, 9]) == Held(2, 0)
    assert t.match("b", [1, 2, 3]) == Held(0, 0)
    t.record("a", [1, 2, 3, 4, 5])
    assert t.match("a", [1, 2, 3, 4, 5, 6]) == Held(5, 5)
    t.record("a", [7, 8, 9])  # 8 blocks > 6: the least recently used (1, 2) go
    assert t.size("a") == 6 and t.match("a", [1, 2, 3]) == Held(0, 0)
    t.keep(["b"])
    assert t.size("a") == 0


def test_rank_prefers_the_conversation_unless_it_is_busier() -> None:
    held = {"a": Held(6, 4), "b": Held(1, 0)}
    sizes = {"a": 50, "b": 10}
    assert rank(held, {"a": 0, "b": 0}, sizes) == (["a", "b"], "prefix")
    assert rank(held, {"a": 1, "b": 0}, sizes, imbalance=1) == (["a", "b"], "prefix")
    assert rank(held, {"a": 1, "b": 0}, sizes, imbalance=0) == (["b", "a"], "load")
    assert rank(held, {"a": 3, "b": 1}, sizes, imbalance=1) == (["b", "a"], "load")
    # Nothing resumed: the least loaded, then the one holding the least.
    none = {"a": Held(0, 0), "b": Held(0, 0), "c": Held(0, 0)}
    order, why = rank(none, {"a": 1, "b": 0, "c": 0}, {"a": 0, "b": 9, "c": 3})
    assert (order, why) == (["c", "b", "a"], "load")
    assert rank({}, {}, {}) == ([], "load")


def _route(table: PrefixTable, req: GenerationRequest, loads: dict[str, int]) -> str:
    hashes = chain_hashes(prompt_blocks(req))
    held = {r: table.match(r, hashes) for r in loads}
    order, _ = rank(held, loads, {r: table.size(r) for r in loads})
    table.record(order[0], hashes)
    return order[0]


def test_interleaved_conversations_spread_and_stay() -> None:
    """Idle replicas: new conversations alternate, every later turn returns home."""
    table = PrefixTable()
    convs = [turns(t, 4) for t in ("Lisbon", "Oslo", "Kyoto", "Quito")]
    idle = {"r1": 0, "r2": 0}
    homes = [_route(table, c[0], idle) for c in convs]
    assert set(homes) == {"r1", "r2"}
    for turn in range(1, 4):
        for c, home in zip(convs, homes, strict=True):
            assert _route(table, c[turn], idle) == home


def test_a_long_new_part_still_resumes() -> None:
    """A big tool result appended to the conversation does not move it."""
    table = PrefixTable()
    (first,) = turns("Lisbon", 1)
    other = turns("Oslo", 1)[0]
    idle = {"r1": 0, "r2": 0}
    home = _route(table, first, idle)
    _route(table, other, idle)
    big = chat(*first.messages,
               {"role": "assistant", "content": "Let me look."},
               {"role": "user", "content": "x" * 20000})
    assert _route(table, big, idle) == home


def test_stats_count_resumes() -> None:
    s = router.RouteStats()
    s.note(10, True, True, 8)
    s.note(10, True, False, 1)
    s.note(4, False, False, 0)
    assert (s.requests, s.resumable, s.resumed, s.matched_blocks) == (3, 2, 1, 9)
    assert s.hit_rate == 0.5 and resumer({"a": Held(0, 0)}) is None


class Replica:
    """What the Ray router reads of a running replica."""

    def __init__(self, name: str) -> None:
        from ray.serve._private.common import DeploymentID
        from ray.serve.request_router import ReplicaID

        self.replica_id = ReplicaID(name, DeploymentID("ModelReplica", "ffwd"))


def test_ray_router_follows_the_conversation_and_backs_off() -> None:
    """The Ray side: a conversation's next turn ranks its replica first, and a round
    that finds no replica with room tells Ray to wait before the next one."""
    import asyncio

    from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata
    from ray.serve.request_router import PendingRequest

    from ffwd.deploy.ray_router import PrefixAffinityRouter

    async def go() -> None:
        r = PrefixAffinityRouter(DeploymentID("ModelReplica", "ffwd"),
                                 DeploymentHandleSource.REPLICA)
        r.initialize_state(imbalance=1)
        reps = [Replica("r1"), Replica("r2")]
        r.update_replicas(reps)  # type: ignore[arg-type]
        first, second = turns("Lisbon", 2)
        for req, home in ((first, reps[1]), (second, None)):
            pending = PendingRequest([req], {}, RequestMetadata("id", "internal"))
            ranked = await r.choose_replicas(reps, pending)  # type: ignore[arg-type]
            assert pending.routing_context.should_backoff
            assert sorted(len(x) for x in ranked) == [1, 1]
            if home is None:
                assert ranked[0] == [reps[1]]
            else:  # both idle and empty: send the first turn to r2
                r.on_request_routed(pending, home.replica_id, None)

    asyncio.run(go())
