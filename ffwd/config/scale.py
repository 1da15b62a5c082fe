"""Scale-out settings (ffwd.deploy): CLI flags and Serve config arguments only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ffwd.values import Parser, choice, float_at_least, int_in, parse_settings

#     --replicas N          model replicas (fixed, or the initial count when autoscaling)
#     --min-replicas N      autoscaling lower bound                            1
#     --max-replicas N      autoscaling upper bound (autoscaling is on when given)
#     --target-ongoing X    requests per replica the autoscaler aims at        2
#     --max-ongoing N       requests a replica holds (running + waiting)       --parallel + 1
#     --replica-cpus X      CPUs reserved per replica (also its torch threads) 1
#     --replica-gpus X      GPUs reserved per replica                          0
#     --router NAME         affine (prefix affinity) | pow2 (Ray's default)    affine
#     --route-imbalance N   extra requests the affine replica may hold         1

Router = Literal["affine", "pow2"]
ROUTERS: tuple[Router, ...] = ("affine", "pow2")


_SCALE_SETTINGS: dict[str, tuple[str, Parser]] = {
    "replicas": ("--replicas", int_in("--replicas", 1)),
    "min_replicas": ("--min-replicas", int_in("--min-replicas", 0)),
    "max_replicas": ("--max-replicas", int_in("--max-replicas", 1)),
    "target_ongoing": ("--target-ongoing", float_at_least("--target-ongoing", 0.1)),
    "max_ongoing": ("--max-ongoing", int_in("--max-ongoing", 1)),
    "replica_cpus": ("--replica-cpus", float_at_least("--replica-cpus", 0)),
    "replica_gpus": ("--replica-gpus", float_at_least("--replica-gpus", 0)),
    "router": ("--router", choice("--router", ROUTERS)),
    "imbalance": ("--route-imbalance", int_in("--route-imbalance", 0)),
}


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    """How many model replicas, what each reserves, and how requests reach them."""

    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int | None = None  # None: a fixed number of replicas
    target_ongoing: float = 2.0
    max_ongoing: int | None = None  # None: the replica's --parallel sequences and one waiting
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    router: Router = "affine"
    imbalance: int = 1

    def ongoing(self, parallel: int) -> int:
        """Requests one replica holds: `max_ongoing`, or by default as many as it decodes at
        once (`parallel`) and one waiting, ready when a sequence comes free."""
        return self.max_ongoing if self.max_ongoing is not None else parallel + 1

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas is not None


def resolve_scale_config(overrides: Mapping[str, object] | None = None) -> ScaleConfig:
    """Scale-out settings from flags or a Serve config's args (None values ignored)."""
    values = parse_settings("scale", _SCALE_SETTINGS, {}, overrides)
    values.setdefault("replicas", max(1, values.get("min_replicas", 1)))
    cfg = ScaleConfig(**values)
    if cfg.max_replicas is not None:
        if cfg.min_replicas > cfg.max_replicas:
            raise ValueError(f"--min-replicas {cfg.min_replicas} exceeds "
                             f"--max-replicas {cfg.max_replicas}")
        if not cfg.min_replicas <= cfg.replicas <= cfg.max_replicas:
            raise ValueError(f"--replicas {cfg.replicas}: expected a start count within "
                             f"--min-replicas {cfg.min_replicas}..--max-replicas "
                             f"{cfg.max_replicas}")
    return cfg
