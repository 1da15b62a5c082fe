"""The soak (`tools.soak`) for five minutes on the embedded model: servers restarted every
round, clients on every API, streams cut by their clients, bad bodies, SIGTERM with
streams in flight, the same greedy reply from each server. Its targets (issue 52): no
5xx, nothing malformed or lost, `/metrics` equal to the clients' counts, `/health` 503
while the server drains."""

from __future__ import annotations

import json
import sys

import pytest

from tools import soak

pytestmark = pytest.mark.slow


def test_a_five_minute_soak_meets_its_targets() -> None:
    res = soak.run(minutes=5, clients=8, round_s=45, parallel=4)  # 4 servers, mostly
    print(json.dumps(res, indent=2), file=sys.stderr)
    assert (res["5xx"], res["malformed"], res["lost"]) == (0, 0, 0), res["problem_samples"]
    assert res["metrics_mismatches"] == []
    assert res["rounds"] >= 3 and res["cut_streams"] > 0
    assert sum(res["by_kind"]["bad"].values()) > 0
    assert res["greedy_replies"] == 1  # the same greedy reply from every server
    for d in res["drains"]:
        assert d["health"].get("503 draining", 0) > 0, d
        assert not d["health"].get("200 after 503") and not d["health"].get("other"), d
        assert d["exit_s"] <= soak.GRACE + 5, d
    assert res["ok"]
