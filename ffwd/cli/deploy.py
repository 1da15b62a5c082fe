"""`ffwd deploy config`: print a Ray Serve config file for `serve deploy`.

    ffwd deploy config --replicas 2 --max-replicas 8 > ffwd.yaml && serve deploy ffwd.yaml

Nothing imports Ray until a deployment is asked for.
"""

from __future__ import annotations

import argparse
import sys

from ffwd.cli.args import (
    add_scale_arguments,
    add_service_arguments,
    deploy_spec,
    resolve_settings,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="deploy_command", metavar="COMMAND", required=True)
    c = sub.add_parser("config", help="print a Ray Serve config file for `serve deploy`",
                       description="Print a Ray Serve config file (YAML) for `serve deploy`: "
                       "the same flags as `ffwd serve`, resolved.")
    add_service_arguments(c)
    add_scale_arguments(c, join=False)


def main(args: argparse.Namespace) -> int:
    try:
        spec = deploy_spec(args, *resolve_settings(args))
    except ValueError as exc:
        print(f"ffwd deploy config: {exc}", file=sys.stderr)
        return 2
    from ffwd.deploy.config import render_config

    sys.stdout.write(render_config(spec))
    return 0
