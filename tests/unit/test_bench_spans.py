"""The bench's span-length section: every verify proposal counted once, by source and
length, and the first span of each repeated request."""

from __future__ import annotations

from ffwd.bench import spans


def _row(system: str, kind: str, rows: list[tuple[str, int, int, int]] | None,
         first: int | None = None, workload: str = "repeat") -> dict[str, object]:
    return {"system": system, "workload": workload, "kind": kind, "spans": rows,
            "first_span": first}


def test_proposals_are_counted_by_source_and_length() -> None:
    runs = [_row("ffwd-echo", "again.1", [("echo", 3, 3, 2), ("echo", 70, 70, 70),
                                          ("recall", 16, 0, 0)]),
            _row("ffwd-echo", "again.2", [("recall", 200, 200, 64)], 64),
            _row("llama-server", "again.2", None)]
    hist = spans.histogram(runs)
    assert set(hist) == {"ffwd-echo"}
    echo, recall = hist["ffwd-echo"]["echo"], hist["ffwd-echo"]["recall"]
    assert sum(echo["proposed"]) == 2 and echo["proposed"][spans.BUCKETS.index(64)] == 1
    assert echo["kept"][spans.BUCKETS.index(2)] == 1  # 2 of 3 kept
    assert recall["proposed"][spans.BUCKETS.index(16)] == 1
    assert recall["proposed"][spans.BUCKETS.index(128)] == 1
    assert recall["kept"][spans.BUCKETS.index(64)] == 1  # the declined 16 kept nothing
    assert sum(recall["kept"]) == 1
    assert spans.first_spans(runs) == {"ffwd-echo": [64]}


def test_the_section_names_every_source_and_is_empty_without_copies() -> None:
    runs = [_row("ffwd-echo", "again.2", [("recall", 40, 40, 40)], 40),
            _row("ffwd-off", "again.2", [], 0)]
    text = "\n".join(spans.markdown(runs))
    assert "| ffwd-echo | recall | proposed | 0 | 0 | 0 | 0 | 0 | 1 | 0 | 0 |" in text
    assert "ffwd-echo: 40" in text and "ffwd-off: 0" in text
    assert spans.markdown([_row("ffwd-off", "x", [], workload="prose")]) == []
