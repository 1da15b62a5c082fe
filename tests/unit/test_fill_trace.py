"""The JSONL proposal trace."""

from __future__ import annotations

import threading
from pathlib import Path

from ffwd.fill import TraceRecord, TraceWriter, first_mismatch, read_trace

FIELDS = ["ts", "origin", "policy", "decision", "generated", "run", "proposed_len", "chosen",
          "accepted", "first_mismatch", "expected_ids", "expected_ms", "plain_ms", "proposed",
          "actual", "proposed_text", "actual_text"]


def test_first_mismatch() -> None:
    assert first_mismatch([1, 2, 3], [1, 2, 4]) == 2
    assert first_mismatch([1, 2], [1, 2]) == -1
    assert first_mismatch([1, 2], [1]) == 1
    assert first_mismatch([], []) == -1


def test_records_round_trip_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "trace.jsonl"
    with TraceWriter(path) as w:
        w.write(TraceRecord("echo", "verify", 7, [1, 2, 3], [1, 2, 5], 2, "abc", "abx"))
        w.write(TraceRecord("template", "assert", 9, [4, 5], [4, 5], 2))
    recs = read_trace(path)
    assert [list(r) for r in recs] == [FIELDS, FIELDS]
    assert recs[0]["first_mismatch"] == 2 and recs[0]["proposed_len"] == 3
    assert recs[1]["first_mismatch"] == -1 and recs[1]["proposed_text"] is None
    assert recs[0]["decision"] == "assert" and recs[0]["expected_ms"] is None


def test_appends_and_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(TraceRecord("echo", "verify", 0, [1, 1], [1, 1], 2))
    w2 = TraceWriter(path)

    def burst() -> None:
        for i in range(200):
            w2.write(TraceRecord("echo", "verify", i, [i, i], [i, 0], 1))

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w2.close()
    assert len(read_trace(path)) == 801
