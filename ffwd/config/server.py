"""The server's limits (ffwd serve, and every replica under ffwd.deploy) and the cache folder.

    FFWD_DEFAULT_MAX_TOKENS  output ids when a request names no limit     1024
    FFWD_MAX_TOKENS_LIMIT    the most output ids a request may ask for     4096
    FFWD_CACHE_DIR           converted models, tokenizers, cost curves     ~/.cache/ffwd
    FFWD_LOG_FORMAT          the server's log lines: text or json          text
    FFWD_CORS_ORIGINS        browser origins allowed besides the server's   (none)
                             own and localhost ones, comma-separated; *: any
    FFWD_KEEP_ALIVE          seconds an idle client connection is kept      120
    FFWD_SHUTDOWN_GRACE      seconds running requests get on SIGTERM        30
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ffwd.values import Parser, SettingError, choice, int_in, parse_settings

DEFAULT_MAX_QUEUE = 16  # requests allowed to wait for the model; more get 429
DEFAULT_MAX_BODY_BYTES = 4 << 20  # larger request bodies get 413
DEFAULT_PROMPT_CACHE_BYTES = 1 << 30  # KV states of other conversations kept, LRU
# Longer than every common HTTP client keeps an idle connection (httpx 5 s, Go and
# reqwest 90 s, curl 118 s; docs/operating.md), so the client lets go first and never
# sends on a connection the server is closing.
DEFAULT_KEEP_ALIVE = 120
# On SIGTERM or SIGINT the running requests get this long to finish, then are cut; with
# the exit's own second or two it stays inside Kubernetes' default 30 s before SIGKILL.
DEFAULT_SHUTDOWN_GRACE = 25
# One request holds the only worker while it decodes: ~90 ids/s here, so the
# limit bounds a request to under a minute unless the operator allows more.


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """How many ids one request may generate: `default` when it names no limit, and at
    most `limit` (a request over it is a 400 that names it)."""

    default: int = 1024
    limit: int = 4096

    def __post_init__(self) -> None:
        if not 1 <= self.default <= self.limit:
            raise ValueError(f"--default-max-tokens {self.default}: expected an integer from "
                             f"1 to --max-tokens-limit ({self.limit})")


_TOKEN_LIMITS: dict[str, tuple[str, Parser]] = {
    "default": ("FFWD_DEFAULT_MAX_TOKENS", int_in("FFWD_DEFAULT_MAX_TOKENS", 1, 1 << 24)),
    "limit": ("FFWD_MAX_TOKENS_LIMIT", int_in("FFWD_MAX_TOKENS_LIMIT", 1, 1 << 24)),
}


def resolve_token_limits(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
) -> TokenLimits:
    """The output limits from the environment (or `env`), then non-None `overrides`."""
    env = os.environ if env is None else env
    return TokenLimits(**parse_settings("token limit", _TOKEN_LIMITS, env, overrides))


def check_limits(max_queue: int, prompt_cache_bytes: int, port: int, max_body_bytes: int) -> None:
    """Raise `ValueError` naming the flag of any server limit out of range."""
    if max_queue < 1:
        raise ValueError(f"--max-queue {max_queue}: expected an integer >= 1")
    if prompt_cache_bytes < 0:
        raise ValueError(f"--prompt-cache-bytes {prompt_cache_bytes}: expected >= 0")
    if not 0 < port < 65536:
        raise ValueError(f"--port {port}: expected 1..65535")
    if max_body_bytes < 1024:
        raise ValueError(f"--max-body-bytes {max_body_bytes}: expected >= 1024")


def resolve_shutdown_grace(flag: object = None, env: Mapping[str, str] | None = None) -> int:
    """FFWD_SHUTDOWN_GRACE, or the --shutdown-grace `flag` (which wins): the seconds the
    running requests get to finish when the server is stopped (0 to 86400; default
    `DEFAULT_SHUTDOWN_GRACE`)."""
    env = os.environ if env is None else env
    raw = flag if flag is not None else env.get("FFWD_SHUTDOWN_GRACE", "").strip() or None
    return DEFAULT_SHUTDOWN_GRACE if raw is None else int_in("FFWD_SHUTDOWN_GRACE", 0, 86400)(
        raw)


def resolve_keep_alive(flag: object = None, env: Mapping[str, str] | None = None) -> int:
    """FFWD_KEEP_ALIVE, or the --keep-alive-timeout `flag` (which wins): the seconds an
    idle HTTP connection is kept open (1 to 86400; default `DEFAULT_KEEP_ALIVE`)."""
    env = os.environ if env is None else env
    raw = flag if flag is not None else env.get("FFWD_KEEP_ALIVE", "").strip() or None
    return DEFAULT_KEEP_ALIVE if raw is None else int_in("FFWD_KEEP_ALIVE", 1, 86400)(raw)


LOG_FORMATS = ("text", "json")


def resolve_log_format(flag: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """FFWD_LOG_FORMAT, or the --log-format `flag` (which wins): ``text`` or ``json``."""
    env = os.environ if env is None else env
    return str(choice("FFWD_LOG_FORMAT", LOG_FORMATS)(
        flag if flag is not None else env.get("FFWD_LOG_FORMAT")))


ANY_ORIGIN = "*"
_ORIGIN = re.compile(r"^[a-z][a-z0-9+.-]*://[^/?#\s@]+$")
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def resolve_cors_origins(flag: str | None = None,
                         env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """FFWD_CORS_ORIGINS, or the --cors-origins `flag` (which wins): the browser origins
    allowed besides the server's own and localhost ones, normalized; ``("*",)``: any
    origin; ``()``: none besides those (the default).

    >>> resolve_cors_origins("https://App.example.com:443/, http://10.0.0.5:3000", env={})
    ('https://app.example.com', 'http://10.0.0.5:3000')
    """
    env = os.environ if env is None else env
    raw = flag if flag is not None else env.get("FFWD_CORS_ORIGINS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if ANY_ORIGIN in names:
        if len(names) > 1:
            raise SettingError("FFWD_CORS_ORIGINS", raw, "* alone, or a list of origins")
        return (ANY_ORIGIN,)
    return tuple(dict.fromkeys(_origin(n, raw) for n in names))


def _origin(name: str, raw: str) -> str:
    """`name` as a browser writes an Origin: lower case, no default port, no slash."""
    origin = name.lower().removesuffix("/")
    default_port = _DEFAULT_PORTS.get(origin.partition("://")[0])
    if default_port:
        origin = origin.removesuffix(default_port)
    if not _ORIGIN.match(origin):
        raise SettingError("FFWD_CORS_ORIGINS", raw, "*, or comma-separated origins such as "
                           "https://app.example.com or http://localhost:3000 (scheme://host"
                           "[:port], no path)")
    return origin


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where converted models and tokenizers are kept (FFWD_CACHE_DIR)."""
    env = os.environ if env is None else env
    raw = env.get("FFWD_CACHE_DIR", "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ffwd"
