"""The Ray Serve config file `ffwd deploy config` prints (for `serve deploy`)."""

from __future__ import annotations

from typing import Any

import yaml

from ffwd.deploy.spec import APP_NAME, DeploySpec

HEADER = """\
# Ray Serve config for ffwd, from `ffwd deploy config`. Deploy it on a running
# cluster whose nodes have ffwd[ray] and the model installed:
#     serve deploy ffwd.yaml            (or: serve run ffwd.yaml)
# `args` go to ffwd.deploy.app:app_builder (model, fill, engine); `deployments`
# are Serve's own options and override ffwd's. engine.threads follows
# ray_actor_options.num_cpus of ModelReplica, and args.keep_alive (what responses
# say) http_options.keep_alive_timeout_s: change each pair together.
"""


def serve_config(spec: DeploySpec) -> dict[str, Any]:
    """A `ServeDeploySchema` document for `spec`."""
    return {
        "proxy_location": "EveryNode",
        "http_options": spec.http_options(),
        "applications": [{
            "name": APP_NAME,
            "route_prefix": "/",
            "import_path": "ffwd.deploy.app:app_builder",
            "args": spec.to_args(),
            "deployments": [spec.model_options(), spec.ingress_options()],
        }],
    }


def render_config(spec: DeploySpec) -> str:
    return HEADER + yaml.safe_dump(serve_config(spec), sort_keys=False)
