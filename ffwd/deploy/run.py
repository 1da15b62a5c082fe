"""`ffwd serve --replicas N`: start (or join) a Ray cluster and run the app until stopped.

Without `--ray-address` the cluster is local and belongs to this process:
stopping `ffwd serve` (Ctrl-C or SIGTERM) shuts Serve and the cluster down.
With it, this process deploys into the existing cluster and deletes only its
own application on the way out.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time
from dataclasses import replace
from types import FrameType

from ffwd.deploy.spec import APP_NAME, DeploySpec


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _check_local_room(spec: DeploySpec, cpus: float, gpus: float) -> str | None:
    """Why the local cluster cannot hold the replicas (None when it can)."""
    s = spec.scale
    n = s.max_replicas or s.replicas
    for kind, need, have in (("CPU", s.replica_cpus, cpus), ("GPU", s.replica_gpus, gpus)):
        if n * need > have:
            return (f"{n} replicas x {need:g} {kind} need {n * need:g} {kind}s and this "
                    f"machine has {have:g}: lower --replica-{kind.lower()}s or --replicas")
    if not _port_free(spec.host, spec.port):
        return f"{spec.host}:{spec.port} is already in use: pick another --port"
    return None


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # runs the clean-up below, as Ctrl-C does


def _proxy_keep_alive(wanted: int) -> int:
    """The idle timeout of the cluster's HTTP proxy, which responses must state: `wanted`,
    unless Serve was already running (joined) with another, which it keeps."""
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    assert client is not None  # serve.start just made or found one
    actual = int(client.http_config.keep_alive_timeout_s)
    if actual != wanted:
        print(f"ffwd serve: this cluster's Serve proxy was started with a keep-alive of "
              f"{actual} s, not --keep-alive-timeout {wanted}: responses say {actual}",
              file=sys.stderr, flush=True)
    return actual


def serve_replicas(spec: DeploySpec, ray_address: str | None) -> int:
    import ray
    from ray import serve

    from ffwd.deploy.app import build_app

    local = ray_address is None
    # "local": a new cluster of our own, even where `ray start` left one to join by default.
    ray.init(address="local" if local else ray_address,
             include_dashboard=False if local else None, logging_level=logging.WARNING)
    # After ray.init: its core worker's C handler would kill us 3 s into the clean-up.
    signal.signal(signal.SIGTERM, _exit)
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    try:
        if local:
            res = ray.cluster_resources()
            problem = _check_local_room(spec, res.get("CPU", 0.0), res.get("GPU", 0.0))
            if problem:
                print(f"ffwd serve: {problem}", file=sys.stderr)
                return 2
        serve.start(http_options=spec.http_options())
        spec = replace(spec, keep_alive=_proxy_keep_alive(spec.keep_alive))
        serve.run(build_app(spec), name=APP_NAME, route_prefix="/", blocking=False)
        print(
            f"ffwd serving {spec.model} on {spec.scale.replicas} replicas (router "
            f"{spec.scale.router}, fill {spec.fill.mode}) at http://{spec.host}:{spec.port}/v1; "
            f"Ray cluster {ray.get_runtime_context().gcs_address} "
            f"({'started here' if local else 'joined'})", file=sys.stderr, flush=True,
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        if local:
            serve.shutdown()
        else:
            serve.delete(APP_NAME)
        ray.shutdown()
