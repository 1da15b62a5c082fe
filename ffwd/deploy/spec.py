"""`DeploySpec`: everything a scale-out deployment needs, resolved, and its Serve options.

The CLI resolves flags into a spec (validated by `ffwd.config`); the spec
travels to every replica as plain data, so no replica reads the environment.
`to_args` / `from_args` are the `args` block of a Serve config file (what
`ffwd deploy config` prints and `serve deploy` hands to `app.app_builder`);
`model_options`, `ingress_options` and `http_options` are the Serve-native
settings derived from the scale settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ffwd.config import (
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUE,
    DEFAULT_PROMPT_CACHE_BYTES,
    SERVER_DEFAULT_FILL,
    EngineConfig,
    FillConfig,
    ScaleConfig,
    TokenLimits,
    check_limits,
    resolve_cors_origins,
    resolve_engine_config,
    resolve_fill_config,
    resolve_keep_alive,
    resolve_log_format,
    resolve_scale_config,
    resolve_token_limits,
)

APP_NAME = "ffwd"
MODEL_DEPLOYMENT = "ModelReplica"
INGRESS_DEPLOYMENT = "Ingress"
ROUTER_CLASS = "ffwd.deploy.ray_router:PrefixAffinityRouter"
_SERVICE_KEYS = ("model", "tool_format", "chat_template", "prompt_cache_bytes", "api_key",
                 "max_queue", "max_body_bytes", "log_format", "keep_alive")


@dataclass(frozen=True)
class DeploySpec:
    model: str = "default"
    fill: FillConfig = field(default_factory=FillConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    tool_format: str | None = None
    chat_template: str | None = None  # the template's text (--chat-template)
    prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES
    api_key: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE  # requests waiting at the ingress for a replica
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    host: str = "127.0.0.1"
    port: int = 8000
    limits: TokenLimits = field(default_factory=TokenLimits)
    log_format: str = "text"  # the ingress's log lines (ffwd.serve.access)
    cors_origins: tuple[str, ...] = ()  # browser origins besides its own and localhost's
    keep_alive: int = DEFAULT_KEEP_ALIVE  # seconds the proxy keeps an idle connection

    def __post_init__(self) -> None:
        check_limits(self.max_queue, self.prompt_cache_bytes, self.port, self.max_body_bytes)
        resolve_log_format(self.log_format)  # a SettingError naming FFWD_LOG_FORMAT
        resolve_keep_alive(self.keep_alive, env={})  # a SettingError naming FFWD_KEEP_ALIVE

    @property
    def max_ongoing(self) -> int:
        """Requests one replica holds, running (up to --parallel, batched) and waiting."""
        return self.scale.ongoing(self.engine.parallel)

    @property
    def replica_engine(self) -> EngineConfig:
        """The engine settings a replica loads with: torch threads = its reserved CPUs."""
        if self.engine.threads or self.scale.replica_cpus < 1:
            return self.engine
        return replace(self.engine, threads=int(self.scale.replica_cpus))

    # --- the Serve config's `args` ---------------------------------------------
    def to_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {k: getattr(self, k) for k in _SERVICE_KEYS}
        args["fill"] = asdict(self.fill)
        args["engine"] = asdict(self.replica_engine)
        args["limits"] = asdict(self.limits)
        if self.cors_origins:
            args["cors_origins"] = ",".join(self.cors_origins)  # as FFWD_CORS_ORIGINS
        if args["api_key"] is None:
            del args["api_key"]  # set it in the file, not on a command line, if needed
        return args

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> DeploySpec:
        """A spec from a Serve config's `args`; unknown keys are an error naming them."""
        known = {*_SERVICE_KEYS, "fill", "engine", "scale", "limits", "cors_origins"}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ValueError(f"unknown ffwd args {unknown}: expected {', '.join(sorted(known))}")
        fill = resolve_fill_config(env={}, overrides=_plain(args.get("fill")),
                                   default_mode=SERVER_DEFAULT_FILL)
        engine = resolve_engine_config(env={}, overrides=_plain(args.get("engine")))
        scale = resolve_scale_config(_plain(args.get("scale")))
        limits = resolve_token_limits(env={}, overrides=_plain(args.get("limits")))
        service = {k: args[k] for k in _SERVICE_KEYS if k in args}
        origins = resolve_cors_origins(str(args.get("cors_origins") or ""), env={})
        return cls(fill=fill, engine=engine, scale=scale, limits=limits, cors_origins=origins,
                   **service)

    # --- Serve options ---------------------------------------------------------
    def model_options(self) -> dict[str, Any]:
        """The model deployment's options (as in a Serve config's `deployments` entry)."""
        s = self.scale
        opts: dict[str, Any] = {
            "name": MODEL_DEPLOYMENT,
            "max_ongoing_requests": self.max_ongoing,
            "max_queued_requests": self.max_queue,
            "ray_actor_options": {"num_cpus": s.replica_cpus, "num_gpus": s.replica_gpus},
            "health_check_period_s": 5.0,
            "graceful_shutdown_timeout_s": 10.0,
            "logging_config": {"log_level": "WARNING", "enable_access_log": False},
        }
        if s.autoscaling:
            opts["autoscaling_config"] = {
                "min_replicas": s.min_replicas, "initial_replicas": s.replicas,
                "max_replicas": s.max_replicas, "target_ongoing_requests": s.target_ongoing,
            }
        else:
            opts["num_replicas"] = s.replicas
        if s.router == "affine":
            opts["request_router_config"] = {
                "request_router_class": ROUTER_CLASS,
                "request_router_kwargs": {"imbalance": s.imbalance},
            }
        return opts

    def ingress_options(self) -> dict[str, Any]:
        """The HTTP ingress: one replica, no CPU reserved, room for every admitted request."""
        s = self.scale
        most = (s.max_replicas or s.replicas) * self.max_ongoing + self.max_queue
        return {
            "name": INGRESS_DEPLOYMENT, "num_replicas": 1,
            "max_ongoing_requests": most + 32,  # + health, metrics and 429 answers
            "ray_actor_options": {"num_cpus": 0},
            "logging_config": {"log_level": "WARNING", "enable_access_log": False},
        }

    def http_options(self) -> dict[str, Any]:
        """Serve's HTTP proxy: where it listens, and its idle timeout (the ingress states
        the same in every response's ``Keep-Alive``)."""
        return {"host": self.host, "port": self.port, "keep_alive_timeout_s": self.keep_alive}


def _plain(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of settings, got {type(value).__name__}")
    return dict(value)
