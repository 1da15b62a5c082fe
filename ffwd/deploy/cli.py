"""`ffwd deploy config` and the scale-out flags of `ffwd serve`.

    ffwd serve --replicas 2                  # a local Ray cluster, two replicas, one port
    ffwd serve --replicas 4 --ray-address HOST:6379
    ffwd deploy config --replicas 2 --max-replicas 8 > ffwd.yaml && serve deploy ffwd.yaml

Neither imports Ray until a deployment is asked for.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ffwd.config import ROUTERS, EngineConfig, FillConfig, resolve_scale_config

_SCALE_FLAGS = ("replicas", "min_replicas", "max_replicas", "target_ongoing", "max_ongoing",
                "replica_cpus", "replica_gpus", "router", "imbalance")


def add_scale_arguments(p: argparse.ArgumentParser, *, join: bool) -> None:
    """The replica flags; `join` adds --ray-address (`ffwd serve` runs the deployment)."""
    g = p.add_argument_group("scale out on Ray Serve (pip install 'ffwd[ray]')")
    g.add_argument("--replicas", default=None,
                   help="model replicas behind one HTTP port (with --max-replicas: the start "
                   "count); `ffwd serve` without it runs one model in this process")
    g.add_argument("--min-replicas", default=None, help="autoscaling lower bound (1)")
    g.add_argument("--max-replicas", default=None, help="autoscaling upper bound: turns it on")
    g.add_argument("--target-ongoing", default=None,
                   help="requests per replica the autoscaler aims at (2)")
    g.add_argument("--max-ongoing", default=None,
                   help="requests one replica holds, running and waiting (2); the rest wait "
                   "at the router, at most --max-queue, then 429")
    g.add_argument("--replica-cpus", default=None,
                   help="CPUs reserved per replica, also its torch threads (1)")
    g.add_argument("--replica-gpus", default=None, help="GPUs reserved per replica (0)")
    g.add_argument("--router", default=None, choices=ROUTERS,
                   help="affine: the replica holding the prompt's longest cached prefix when "
                   "load is balanced, else the least loaded (default); pow2: Ray's default")
    g.add_argument("--route-imbalance", dest="imbalance", default=None,
                   help="requests the affine replica may hold beyond the least loaded (1)")
    if join:
        g.add_argument("--ray-address", default=None,
                       help="join this Ray cluster (default: start a local one)")


def replica_spec(args: argparse.Namespace, fill: FillConfig, engine: EngineConfig) -> Any:
    """The `DeploySpec` the flags ask for, or None when no replica flag is given."""
    given = [getattr(args, k) for k in (*_SCALE_FLAGS, "ray_address") if hasattr(args, k)]
    return None if all(v is None for v in given) else build_spec(args, fill, engine)


def build_spec(args: argparse.Namespace, fill: FillConfig, engine: EngineConfig) -> Any:
    from ffwd.deploy.spec import DeploySpec

    return DeploySpec(
        args.model, fill, engine, resolve_scale_config({k: getattr(args, k) for k in _SCALE_FLAGS}),
        args.tool_format, args.prompt_cache_bytes, args.api_key, args.max_queue,
        args.max_body_bytes, args.host, args.port,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ffwd.serve.cli import add_service_arguments

    sub = p.add_subparsers(dest="deploy_command", metavar="COMMAND", required=True)
    c = sub.add_parser("config", help="print a Ray Serve config file for `serve deploy`",
                       description="Print a Ray Serve config file (YAML) for `serve deploy`: "
                       "the same flags as `ffwd serve`, resolved.")
    add_service_arguments(c)
    add_scale_arguments(c, join=False)


def main(args: argparse.Namespace) -> int:
    from ffwd.serve.cli import resolve_settings

    try:
        spec = build_spec(args, *resolve_settings(args))
    except ValueError as exc:
        print(f"ffwd deploy config: {exc}", file=sys.stderr)
        return 2
    from ffwd.deploy.config import render_config

    sys.stdout.write(render_config(spec))
    return 0
