"""`PrefixAffinityRouter`: `router.rank` as a Ray Serve request router.

Name it in a deployment's `request_router_config` as
``ffwd.deploy.ray_router:PrefixAffinityRouter``; its `request_router_kwargs`
are `initialize_state`'s. Ray runs one per deployment handle (here: in the
ingress replica). Each returned rank holds one replica: Ray sends the request
to the first that has room (`max_ongoing_requests`) and waits, re-ranking,
when none has.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from ffwd.deploy import router as policy
from ffwd.deploy.router import (
    DEFAULT_MAX_BLOCKS,
    PrefixTable,
    chain_hashes,
    prompt_blocks,
    rank,
    resumer,
)


def _hashes(pending: PendingRequest | None) -> list[int]:
    if pending is None or not pending.args:
        return []
    return chain_hashes(prompt_blocks(pending.args[0]))


class PrefixAffinityRouter(RequestRouter):
    """Longest cached prefix when load is balanced, least loaded otherwise (see `router`)."""

    def initialize_state(
        self, imbalance: int = 1, max_blocks: int = DEFAULT_MAX_BLOCKS, **kwargs: Any
    ) -> None:
        if kwargs:
            raise ValueError(f"unknown request_router_kwargs {sorted(kwargs)}: expected "
                             "imbalance, max_blocks")
        if imbalance < 0 or max_blocks < 1:
            raise ValueError(f"request_router_kwargs imbalance={imbalance} (expected >= 0), "
                             f"max_blocks={max_blocks} (expected >= 1)")
        self.imbalance = imbalance
        self.table = PrefixTable(max_blocks)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is not None:
            # Every replica is ranked each round, so a round that finds none with room
            # has nothing left to try: Ray should wait before the next (else it spins).
            pending_request.routing_context.should_backoff = True
        hashes = _hashes(pending_request)
        by_id = {r.replica_id: r for r in candidate_replicas}
        loads = self._loads(candidate_replicas)
        order, _ = rank(
            {i: self.table.match(i, hashes) for i in by_id}, loads,
            {i: self.table.size(i) for i in by_id}, imbalance=self.imbalance,
        )
        return [[by_id[i]] for i in order]

    def _loads(self, replicas: list[RunningReplica]) -> dict[ReplicaID, int]:
        """Ongoing requests per replica, as Ray last heard. Unknown counts as idle: Ray
        probes a replica it knows nothing of before sending to it, and skips it if it
        does not answer, so an optimistic guess costs one probe, while a pessimistic
        one would keep a slow-to-answer new replica out of the ranking for good."""
        cache = self.replica_queue_len_cache
        return {r.replica_id: cache.get(r.replica_id) or 0 for r in replicas}

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        hashes = _hashes(pending_request)
        held = {i: self.table.match(i, hashes) for i in self.curr_replicas}
        target = resumer(held)
        # Through the module: Ray ships this class by value, so a name imported
        # here would be a copy of the counters, not the ingress's.
        policy.STATS.note(len(hashes), target is not None, target == replica_id,
                          held[replica_id].blocks if replica_id in held else 0)
        self.table.record(replica_id, hashes)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self.table.keep(r.replica_id for r in replicas)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.table.keep(self.curr_replicas)
