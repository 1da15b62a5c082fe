"""Every FFWD_* setting, resolved and validated in one place.

Values come from the environment or from explicit overrides (CLI flags, the
``ffwd`` object of a request). A malformed value raises `ValueError` naming
the variable, the value and what is accepted; nothing falls back silently.
No module outside this package reads `os.environ`.

* `fill`: FFWD_FILL and FFWD_FILL_* (process and per-request fill settings)
* `engine`: FFWD_BACKEND, FFWD_THREADS, FFWD_KV_CACHE ... (how the model runs)
* `server`: the server's limits, FFWD_*MAX_TOKENS*, FFWD_CACHE_DIR, FFWD_LOG_FORMAT,
  FFWD_CORS_ORIGINS, FFWD_KEEP_ALIVE, FFWD_SHUTDOWN_GRACE
* `scale`: replicas and routing under Ray Serve (flags only)
* `places`: where models live (HF_HUB_CACHE, HF_HOME, OLLAMA_MODELS ...) and whether
  ffwd may download one (HF_ENDPOINT, HF_HUB_OFFLINE, --offline)
"""

from ffwd.config.engine import (
    BACKENDS,
    DEFAULT_PARALLEL,
    DTYPES,
    FLASH_ATTNS,
    KV_CACHES,
    BackendKind,
    Dtype,
    EngineConfig,
    KvCache,
    resolve_backend,
    resolve_device,
    resolve_dtype,
    resolve_engine_config,
)
from ffwd.config.fill import (
    FILL_MODES,
    REQUEST_FILL_TYPES,
    SERVER_DEFAULT_FILL,
    FillConfig,
    FillMode,
    resolve_fill_config,
    resolve_fill_mode,
)
from ffwd.config.places import ModelPlaces, resolve_model_places
from ffwd.config.scale import ROUTERS, Router, ScaleConfig, resolve_scale_config
from ffwd.config.server import (
    ANY_ORIGIN,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUE,
    DEFAULT_PROMPT_CACHE_BYTES,
    DEFAULT_SHUTDOWN_GRACE,
    LOG_FORMATS,
    OutputCap,
    TokenLimits,
    cache_dir,
    check_limits,
    resolve_cors_origins,
    resolve_keep_alive,
    resolve_log_format,
    resolve_shutdown_grace,
    resolve_token_limits,
)
from ffwd.values import SettingError

__all__ = [
    "ANY_ORIGIN", "BACKENDS", "DEFAULT_KEEP_ALIVE", "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_PARALLEL", "DEFAULT_PROMPT_CACHE_BYTES", "DEFAULT_SHUTDOWN_GRACE",
    "DTYPES", "FILL_MODES", "FLASH_ATTNS", "KV_CACHES", "LOG_FORMATS", "REQUEST_FILL_TYPES",
    "ROUTERS", "SERVER_DEFAULT_FILL",
    "BackendKind", "Dtype", "EngineConfig", "FillConfig", "FillMode", "KvCache",
    "ModelPlaces", "OutputCap", "Router",
    "ScaleConfig", "SettingError", "TokenLimits", "cache_dir", "check_limits",
    "resolve_backend", "resolve_cors_origins", "resolve_device", "resolve_dtype",
    "resolve_engine_config",
    "resolve_fill_config", "resolve_fill_mode", "resolve_keep_alive", "resolve_log_format",
    "resolve_model_places",
    "resolve_scale_config", "resolve_shutdown_grace",
    "resolve_token_limits",
]
