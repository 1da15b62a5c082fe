"""The decode loop on tiny random models: fill never changes greedy output, only its cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ffwd.config import FillConfig
from ffwd.engine.core.decode import fixed_policy
from ffwd.engine.core.generate import Prepared, generate, stream_generate
from ffwd.engine.events import END, GenerationResult
from ffwd.engine.sample.sampling import SamplingParams
from ffwd.engine.sample.text import StopMatcher, ToolCalls
from ffwd.fill import FillPlan, FillRow, read_trace
from ffwd.templates.formats import get_format
from ffwd.templates.text import Detokenizer
from tests.engine.backends import make_backend
from tests.engine.tiny_models import CharTokenizer, repetitive_prompt, tiny_backend

TOK = CharTokenizer()
ECHO = FillConfig(mode="echo", k=2, trace=True)  # trace=True: cache checks on every step


def run(
    family: str = "llama",
    prompt: list[int] | None = None,
    fill: FillConfig | None = None,
    *,
    eos: tuple[int, ...] = (),
    plan: FillPlan | None = None,
    **kw: Any,
) -> GenerationResult:
    backend = make_backend(family if ":" in family else f"transformers:{family}", eos)
    prompt = repetitive_prompt(0) if prompt is None else prompt
    if fill is not None and plan is None:
        plan = FillPlan()
    return generate(backend, TOK, prompt, max_tokens=kw.pop("max_tokens", 40), plan=plan,
                    fill=fill, **kw)


@pytest.mark.parametrize("probe", [True, False], ids=["probe-first", "combined"])
@pytest.mark.parametrize("family", ["llama", "qwen2_sliding", "lfm2", "qwen3_next", "falcon_h1",
                                    "llamacpp:llama", "llamacpp:gemma3", "llamacpp:mamba"])
def test_greedy_echo_is_identical_to_off_with_fewer_forwards(family: str, probe: bool) -> None:
    off_calls = echo_calls = accepted = rejected = 0
    for seed in range(3):
        prompt = repetitive_prompt(seed)
        off = run(family, prompt)
        echo = run(family, prompt, ECHO, policy=fixed_policy(probe))
        assert echo.token_ids == off.token_ids and echo.text == off.text
        assert echo.finish_reason == off.finish_reason == "length"
        off_calls += off.forward_calls
        echo_calls += echo.forward_calls
        accepted += echo.stats.verify_accepted
        rejected += echo.stats.verify_rejected
    assert echo_calls < off_calls
    assert accepted > 0 and rejected > 0  # both paths of verify were exercised


def _echo_positions(res: GenerationResult) -> list[int]:
    return [i for i, o in enumerate(res.origins) if o == "echo"]


def test_stop_string_inside_an_injected_span() -> None:
    full = run(fill=ECHO)
    text = full.text
    # The shortest stop (two characters or more) whose first occurrence ends on an injected id.
    stop = min(
        (text[a : p + 1] for p in _echo_positions(full) for a in range(p)
         if text.find(text[a : p + 1]) == a),
        key=len,
    )
    off = run(stop=[stop])
    echo = run(fill=ECHO, stop=[stop])
    assert echo.finish_reason == off.finish_reason == "stop"
    assert echo.token_ids == off.token_ids and echo.text == off.text
    assert stop not in echo.text and echo.origins[-1] == "echo"


def test_max_tokens_inside_a_span_ends_where_plain_decoding_does() -> None:
    full = run(fill=ECHO)
    cuts = [p + 1 for p in _echo_positions(full) if p + 1 < len(full.token_ids)][:6]
    assert cuts
    for n in cuts:
        off = run(max_tokens=n)
        echo = run(fill=ECHO, max_tokens=n)
        assert echo.token_ids == off.token_ids and len(echo.token_ids) == n
        assert echo.finish_reason == "length"
        assert echo.forward_calls <= off.forward_calls


def _eos_candidate(tmp_path: Path) -> tuple[list[int], int, int]:
    """A prompt, an id and its index where an accepted echo span carries a first-seen id.

    The prompt holds the model's own continuation, so echo copies it; the id
    sits at span position >= 2, so the span cut before it still has 2 ids.
    """
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        head = torch.randint(0, 64, (12,), generator=g).tolist()
        prompt = [*head, *run(prompt=head, max_tokens=16).token_ids, *head]
        path = tmp_path / f"{seed}.jsonl"
        full = run(prompt=prompt, fill=FillConfig(mode="echo", k=2, trace=str(path)), max_tokens=30)
        for rec in read_trace(path):
            at, proposed = int(rec["generated"]), rec["proposed"]  # type: ignore[call-overload]
            for j in range(2, int(rec["accepted"])):  # type: ignore[call-overload]
                if proposed[j] not in full.token_ids[: at + j]:
                    return prompt, proposed[j], at + j
    raise AssertionError("no seed gives an echo span with a first-seen id")


def test_eos_inside_a_copied_span(tmp_path: Path) -> None:
    prompt, eos_id, index = _eos_candidate(tmp_path)
    off = run(prompt=prompt, eos=(eos_id,), max_tokens=30)
    echo = run(prompt=prompt, fill=ECHO, eos=(eos_id,), max_tokens=30)
    assert off.token_ids == echo.token_ids and len(echo.token_ids) == index
    assert echo.finish_reason == off.finish_reason == "stop"
    assert echo.origins[-1] == "echo"  # the span was cut right before the EOS id


def test_assert_span_rides_in_one_forward() -> None:
    off = run(max_tokens=24)
    assert off.forward_calls == 24  # one prefill + one forward per id but the last
    trigger = (off.token_ids[3],)
    span = (60, 61, 62, 63, 60, 61)
    plan = FillPlan(rows=(FillRow(trigger, span, "scaffold"),))
    res = run(plan=plan, fill=FillConfig(mode="strict", trace=True), max_tokens=24)
    ids = res.token_ids
    assert ids[:4] == off.token_ids[:4] and tuple(ids[4:10]) == span
    assert res.origins[4:10] == ["template"] * 6
    spans = res.stats.span_lens
    assert spans and res.stats.strict == sum(spans) and len(ids) == 24
    # Each span's ids ride with the id that triggered it: a forward saved per span id.
    assert res.forward_calls == off.forward_calls - sum(spans)

    chunked = run(plan=plan, fill=FillConfig(mode="strict", append_chunk_size=2), max_tokens=24)
    assert chunked.token_ids == ids
    extra = sum(-(-(1 + n) // 2) - 1 for n in chunked.stats.span_lens)
    assert chunked.forward_calls == res.forward_calls + extra


def test_forced_opening_is_injected_before_the_first_sample() -> None:
    prompt = repetitive_prompt(0)
    span = (60, 61, 62, 63)
    plan = FillPlan(rows=(FillRow(tuple(prompt[-2:]), span, "scaffold"),))
    off = run(prompt=prompt, max_tokens=20)
    res = run(prompt=prompt, plan=plan, fill=FillConfig(mode="strict", trace=True), max_tokens=20)
    assert tuple(res.token_ids[:4]) == span and res.origins[:4] == ["template"] * 4
    assert res.stats.decode_steps == 16 and len(res.token_ids) == 20
    # The span follows the prefill in one forward: it saves all its ids but one.
    assert res.forward_calls == off.forward_calls - (len(span) - 1) - (
        sum(res.stats.span_lens) - len(span)
    )


@pytest.mark.parametrize("family", ["qwen3_next", "falcon_h1", "llamacpp:mamba"])
def test_recurrent_verify_checkpoints_and_counts(family: str) -> None:
    prompt = repetitive_prompt(1)
    off = run(family, prompt)
    echo = run(family, prompt, ECHO)
    assert echo.token_ids == off.token_ids
    st = echo.stats
    assert st.verify_events > 0 and st.checkpoint_ms > 0 and st.verify_unsupported == 0


def test_mamba_drops_verify_and_counts_it() -> None:
    prompt = repetitive_prompt(1)
    off = run("mamba", prompt)
    echo = run("mamba", prompt, ECHO)
    assert echo.token_ids == off.token_ids
    assert echo.stats.verify_unsupported > 0 and echo.stats.verify_events == 0
    assert echo.forward_calls == off.forward_calls


def test_trace_records_what_the_model_said(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    res = run(fill=FillConfig(mode="echo", k=2, trace=str(path)))
    records = read_trace(path)
    assert len(records) == res.stats.verify_events > 0
    for r in records:
        assert r["policy"] == "verify" and r["origin"] == "echo"
        mismatch = r["first_mismatch"]
        assert r["accepted"] == (r["proposed_len"] if mismatch == -1 else mismatch)
        assert r["proposed_text"] == TOK.decode(r["proposed"])  # type: ignore[arg-type]


def test_cancellation_is_checked_on_every_id() -> None:
    seen: list[int] = []
    backend = tiny_backend()
    prep = Prepared(repetitive_prompt(0), max_tokens=40, plan=FillPlan(), fill=ECHO)
    events = []
    for e in stream_generate(backend, TOK, prep, cancelled=lambda: len(seen) >= 7):
        events.append(e)
        seen.append(e.id)
    assert all(e.result is None for e in events[:-1])
    last = events[-1]
    seen.pop()  # the last event is no token
    assert last.id == END and last.result is not None  # only the last carries the finish
    assert last.result.finish_reason == "cancelled"
    assert len(last.result.token_ids) == 7 and last.result.token_ids == seen


def test_prefix_reuse_across_generations() -> None:
    backend = tiny_backend()
    prompt = repetitive_prompt(2)
    first = generate(backend, TOK, prompt, max_tokens=10)
    second = generate(backend, TOK, [*prompt, *first.token_ids, 3, 4], max_tokens=10)
    assert first.cached_tokens == 0 and second.cached_tokens == len(prompt) + 9


def test_stop_matcher_holds_back_partial_matches() -> None:
    m = StopMatcher(["END"])
    assert m.feed("abE") == ("ab", None) and m.holding
    assert m.feed("N") == ("", None)
    assert m.feed("Dzz") == ("", "END")
    m = StopMatcher(["xy", "b"])
    assert m.feed("ax") == ("a", None)
    assert m.feed("b") == ("x", "b")  # the earliest match wins
    assert m.flush() == "" and not m.holding


def test_detokenizer_waits_for_whole_characters() -> None:
    class Bytes:
        def decode(self, ids: list[int], **kw: bool) -> str:
            return bytes(ids).decode("utf-8", errors="replace")

    d = Detokenizer(Bytes())
    euro = list("€".encode())
    assert d.feed([ord("a")]) == "a"
    assert d.feed([euro[0]]) == "" and d.feed([euro[1]]) == "" and d.pending
    assert d.feed([euro[2]]) == "€" and not d.pending
    assert d.feed([euro[0]]) == "" and d.flush() == "\ufffd"


@pytest.mark.parametrize("family", ["llama", "llamacpp:llama"])
def test_an_assert_span_right_after_a_rejected_verify_span(family: str) -> None:
    # A rejected verify span is cut from the cache, which leaves no "last logits";
    # the next sampled id may then trigger a row whose span is forwarded with it.
    # With logprobs (or a trace) every row of that forward is read: the head's row
    # must not be looked up in the cut cache (this was a 500 on the default path).
    rows = tuple(FillRow((t,), (t, (t + 1) % 64), "scaffold") for t in range(0, 64, 3))
    plan = FillPlan(rows=rows)
    fill = FillConfig(mode="echo", k=2, trace=True)
    events = 0
    for seed in range(6):
        backend = make_backend(family if ":" in family else f"transformers:{family}")
        params = SamplingParams(temperature=1.0, seed=seed)
        res = generate(backend, TOK, repetitive_prompt(seed), params, max_tokens=40, plan=plan,
                       fill=fill, logprobs=1, policy=fixed_policy(False))
        assert res.finish_reason == "length" and len(res.token_ids) == 40
        events += res.stats.verify_rejected and res.stats.strict
    assert events  # both a rejection and a row happened in some run


def test_recall_copies_an_earlier_output_and_changes_nothing_but_the_cost() -> None:
    # The same request again: its earlier output is in the recall index, so the copy is
    # verified in spans (origin "recall"), with exactly the ids of plain decoding.
    from ffwd.fill.recall import RecallConfig, RecallIndex

    backend = make_backend("transformers:llama")
    prompt = list(range(3, 40, 2))  # no repeats: echo has nothing to copy from the prompt
    off = generate(backend, TOK, prompt, max_tokens=40)
    index = RecallIndex(RecallConfig(k=2, max_span=16, max_candidates=8, max_bytes=1 << 20))
    index.add("alice", off.token_ids)
    fill = FillConfig(mode="echo", k=2, trace=True)
    again = generate(backend, TOK, prompt, max_tokens=40, plan=FillPlan(), fill=fill,
                     copies=[index.source("alice")], policy=fixed_policy(False))
    assert again.token_ids == off.token_ids and again.stats.recall > 0
    assert "recall" in again.origins and again.forward_calls < off.forward_calls
    other = generate(backend, TOK, prompt, max_tokens=40, plan=FillPlan(), fill=fill,
                     copies=[index.source("bob")], policy=fixed_policy(False))
    assert other.token_ids == off.token_ids and other.stats.recall == 0


class MarkupTokenizer(CharTokenizer):
    """Ids that spell a tool call's markup (hermes), so rows can write it."""

    ALPHABET = '<>{}[]"_:, \n/' + CharTokenizer.ALPHABET[:51]

    def ids(self, text: str) -> tuple[int, ...]:
        return tuple(self.ALPHABET.index(c) for c in text)


def test_markup_that_fails_to_parse_after_a_row_disarms_the_rows() -> None:
    # A forced opening writes a call up to its arguments; then every sampled id triggers
    # a row that writes "]]", which no JSON parser reads. The first failure after a row
    # fired disarms the rows: without that, every later sample would fire one again.
    tok = MarkupTokenizer()
    prompt = repetitive_prompt(0)
    opening = tok.ids('<tool_call>\n{"name": "f", "arguments": ')
    rows = (FillRow(tuple(prompt[-2:]), opening, "scaffold"),
            *(FillRow((t,), tok.ids("]]"), "scaffold") for t in range(64)))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    res = generate(tiny_backend(), tok, prompt, max_tokens=80, plan=FillPlan(rows=rows),
                   fill=FillConfig(mode="strict", max_span=64),
                   calls=ToolCalls(get_format("hermes"), tools))
    assert res.text.startswith(tok.decode(list(opening)))
    assert res.stats.parse_fallback == 1
    assert len(opening) <= res.stats.strict <= len(opening) + 2  # no row after the failure


@pytest.mark.parametrize("family", ["llama", "lfm2", "llamacpp:llama"])
def test_a_determined_head_and_a_recalled_copy_share_one_forward(family: str) -> None:
    # The same request again: a row determines the two ids after the first sampled one,
    # and recall (which holds the earlier request, prompt and output) knows the rest.
    # One span carries both: the head asserted, the copy verified; greedy output unchanged.
    from ffwd.fill.recall import RecallConfig, RecallIndex

    backend = make_backend(family if ":" in family else f"transformers:{family}")
    prompt = list(range(3, 40, 2))
    off = generate(backend, TOK, prompt, max_tokens=40)
    ids = [*prompt, *off.token_ids]
    trigger = (prompt[-1], off.token_ids[0])
    assert all(tuple(ids[i : i + 2]) != trigger for i in range(len(ids) - 1) if i != 18)
    head = FillRow(trigger, tuple(off.token_ids[1:3]), "scaffold")
    index = RecallIndex(RecallConfig(k=2, max_span=64, max_candidates=8, max_bytes=1 << 20))
    index.add("alice", ids)
    again = generate(backend, TOK, prompt, max_tokens=40, plan=FillPlan(rows=(head,)),
                     fill=ECHO, copies=[index.source("alice")], policy=fixed_policy(False))
    assert again.token_ids == off.token_ids
    st = again.stats
    assert (st.merged, st.strict, st.span_lens[0]) == (1, 2, 39)  # 2 asserted + 37 recalled
    assert again.origins[:4] == ["sampled", "template", "template", "recall"]
    assert st.recall == 37 and again.forward_calls < off.forward_calls
    # A cache that can neither rewind nor checkpoint cannot verify: the head goes alone.
    stuck = type("Stuck", (type(backend),), {"can_rewind": False, "can_checkpoint": False})
    backend.__class__ = stuck
    alone = generate(backend, TOK, prompt, max_tokens=40, plan=FillPlan(rows=(head,)),
                     fill=ECHO, copies=[index.source("alice")], policy=fixed_policy(False))
    assert alone.token_ids == off.token_ids
    assert (alone.stats.strict, alone.stats.recall, alone.stats.merged) == (2, 0, 0)
    assert alone.stats.verify_unsupported > 0
