"""`ffwd.bench.fidelity.explain_difference` on the real service (tiny model): where the
bench's greedy ids leave a peer's, it re-decodes on the engine and names the first
differing id and the logit gap between the two choices."""

from __future__ import annotations

from ffwd.bench.fidelity import explain_difference
from ffwd.bench.workloads.items import Item
from ffwd.config import FillConfig
from ffwd.engine.core.generate import generate
from tests.engine.tiny_service import tiny_service

ITEM = Item("prose", "0", [{"role": "user", "content": "hi"}], max_tokens=12)


def test_a_difference_is_found_at_its_first_id_and_scored() -> None:
    svc = tiny_service(FillConfig(mode="off"), capped=False)
    prompt = svc.tokenizer.encode("Once upon a time")
    ours = generate(svc.backend, svc.tokenizer, prompt, max_tokens=12).token_ids
    assert len(ours) > 4
    peer = [*ours[:3], (ours[3] + 1) % svc.backend.vocab_size, *ours[4:]]
    why = explain_difference(svc, ITEM, prompt, "llama-server", peer)
    assert why.startswith("first differs at output id 3:") and "logit gap" in why
    same = explain_difference(svc, ITEM, prompt, "llama-server", ours[:6])
    assert same.startswith("the same ids over the first 6")
