"""The server's limits (ffwd serve, and every replica under ffwd.deploy) and the cache folder.

    FFWD_DEFAULT_MAX_TOKENS  output ids when a request names no limit     1024
    FFWD_MAX_TOKENS_LIMIT    the most output ids one request generates;    4096
                             a request asking for more is capped to it
    FFWD_STRICT_MAX_TOKENS   1: a request asking for more than the limit    0
                             is a 400 instead
    FFWD_CACHE_DIR           converted models, tokenizers, cost curves     ~/.cache/ffwd
    FFWD_LOG_FORMAT          the server's log lines: text or json          text
    FFWD_CORS_ORIGINS        browser origins allowed besides the server's   (none)
                             own and localhost ones, comma-separated; *: any
    FFWD_KEEP_ALIVE          seconds an idle client connection is kept      120
    FFWD_SHUTDOWN_GRACE      seconds running requests get on SIGTERM        25
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ffwd.values import Parser, SettingError, choice, flag, int_in, parse_settings

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

CappedBy = Literal["max_tokens_limit", "context_window"]


@dataclass(frozen=True, slots=True)
class OutputCap:
    """A request's output limit lowered by the server: it asked for `asked` ids and may
    generate `max_tokens`, lowered by `by` (``--max-tokens-limit``, or the room the
    context window leaves after the prompt)."""

    asked: int
    max_tokens: int
    by: CappedBy

    def as_dict(self) -> dict[str, object]:
        return {"max_tokens_asked": self.asked, "max_tokens": self.max_tokens,
                "capped_by": self.by}


# One request holds its sequence while it decodes: ~90 ids/s here, so the limit
# bounds a request to under a minute unless the operator allows more.
@dataclass(frozen=True, slots=True)
class TokenLimits:
    """How many ids one request may generate: `default` when it names no limit, and at
    most `limit`; a request asking for more is capped (`bound`), or under `strict` a 400
    that names it (`refuses`)."""

    default: int = 1024
    limit: int = 4096
    strict: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.default <= self.limit:
            raise ValueError(f"--default-max-tokens {self.default}: expected an integer from "
                             f"1 to --max-tokens-limit ({self.limit})")

    def refuses(self, asked: int | None) -> bool:
        """Whether a request asking for `asked` output ids is refused (only under
        `strict`, over the limit)."""
        return self.strict and asked is not None and asked > self.limit

    def bound(self, asked: int | None, room: int) -> tuple[int, OutputCap | None]:
        """The output ids a request asking for `asked` (None: the default) may generate,
        when the context leaves `room` after its prompt; and the cap, when that is fewer
        than it asked for (the run then ends with ``length`` at the bound).

        >>> TokenLimits().bound(32000, room=8000)
        (4096, OutputCap(asked=32000, max_tokens=4096, by='max_tokens_limit'))
        >>> TokenLimits().bound(32000, room=1200)
        (1200, OutputCap(asked=32000, max_tokens=1200, by='context_window'))
        >>> TokenLimits().bound(None, room=500), TokenLimits().bound(64, room=500)
        ((500, None), (64, None))
        """
        wanted = self.default if asked is None else asked
        bound = min(wanted, self.limit, room)
        if asked is None or bound >= asked:
            return bound, None
        return bound, OutputCap(asked, bound, "max_tokens_limit" if self.limit <= room
                                else "context_window")


_TOKEN_LIMITS: dict[str, tuple[str, Parser]] = {
    "default": ("FFWD_DEFAULT_MAX_TOKENS", int_in("FFWD_DEFAULT_MAX_TOKENS", 1, 1 << 24)),
    "limit": ("FFWD_MAX_TOKENS_LIMIT", int_in("FFWD_MAX_TOKENS_LIMIT", 1, 1 << 24)),
    "strict": ("FFWD_STRICT_MAX_TOKENS", flag("FFWD_STRICT_MAX_TOKENS")),
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
