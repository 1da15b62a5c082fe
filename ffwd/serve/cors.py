"""Which web pages may call the API from a browser (CORS), and the headers that say so.

A browser names the page's origin in ``Origin`` on a cross-origin request, and
first sends a preflight (``OPTIONS`` with ``Access-Control-Request-Method``)
for any request that is not "simple" (a JSON body, an ``Authorization``
header). `CorsPolicy(listed)` decides, as Ollama does by default:

* allowed: the server's own origin (the playground it serves), localhost
  origins (``http(s)://localhost``, ``127.0.0.1``, ``[::1]``, any port) and
  the origins the operator lists (``--cors-origins``, FFWD_CORS_ORIGINS;
  ``*``: any);
* an allowed cross-origin request gets ``Access-Control-Allow-Origin`` (its
  origin) and the headers its page may read (`response_headers`); its
  preflight is answered 204 with the methods and headers it may send
  (`preflight_headers`);
* any other origin gets no CORS headers, and its request is refused (403)
  before it reaches the API: a browser sends a "simple" cross-origin POST
  anyway and only hides the reply, so without the refusal any web page could
  make the model work.

A request without ``Origin`` (the SDKs, curl) is no browser's cross-origin
request: nothing here applies to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from ffwd.config import ANY_ORIGIN

Headers = list[tuple[bytes, bytes]]
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
METHODS = b"GET, POST, DELETE, OPTIONS"
# What a page may send when its preflight names nothing: the SDKs' own headers.
SENT = b"authorization, content-type, x-api-key, anthropic-version, x-request-id"
EXPOSED = b"x-request-id, request-id, retry-after"  # what a page may read of a reply
MAX_AGE = b"600"  # seconds a browser may keep a preflight's answer
_HEADER_LIST = re.compile(rb"^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$")


def is_local(origin: str) -> bool:
    """Whether `origin` is a page on this machine (a localhost origin, any port).

    >>> is_local("http://localhost:5173"), is_local("https://[::1]"), is_local("http://evil.io")
    (True, True, False)
    """
    try:
        parts = urlsplit(origin)
        host = parts.hostname or ""
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and (host in LOCAL_HOSTS
                                                  or host.endswith(".localhost"))


def same_origin(origin: str, host: str | None, fetch_site: str | None) -> bool:
    """Whether the request comes from a page this server served: the browser says so
    (``Sec-Fetch-Site: same-origin``), or the origin's host is the request's ``Host``.

    >>> same_origin("http://10.0.0.2:8000", "10.0.0.2:8000", None)
    True
    >>> same_origin("http://evil.io", "10.0.0.2:8000", "cross-site")
    False
    """
    if fetch_site == "same-origin":
        return True
    return host is not None and origin.partition("://")[2] == host.lower()


class CorsPolicy:
    """The browser origins allowed to call the API (see the module docstring)."""

    def __init__(self, listed: Sequence[str] = ()) -> None:
        self.any = ANY_ORIGIN in listed
        self.listed = frozenset(listed)

    def allows(self, origin: str) -> bool:
        """Whether a page at `origin` (not the server's own) may call the API."""
        return self.any or origin in self.listed or is_local(origin)

    @staticmethod
    def response_headers(origin: str) -> Headers:
        """The headers of every reply to an allowed cross-origin request."""
        return [(b"access-control-allow-origin", origin.encode()), (b"vary", b"Origin"),
                (b"access-control-expose-headers", EXPOSED)]

    @staticmethod
    def preflight_headers(requested: bytes | None) -> Headers:
        """A preflight's answer besides `response_headers`: what the page may send (the
        headers it asked for, when they are a plain list of names).

        >>> dict(CorsPolicy.preflight_headers(b"content-type, x-stainless-os"))[
        ...     b"access-control-allow-headers"]
        b'content-type, x-stainless-os'
        """
        sent = requested.strip() if requested and _HEADER_LIST.match(requested.strip()) else SENT
        return [(b"access-control-allow-methods", METHODS),
                (b"access-control-allow-headers", sent),
                (b"access-control-max-age", MAX_AGE)]

    def describe(self) -> str:
        """Which pages may call the API, for the start-up banner.

        >>> CorsPolicy(["https://app.example.com"]).describe()
        "the server's own, localhost's and https://app.example.com"
        """
        if self.any:
            return "any origin (--cors-origins *)"
        listed = ", ".join(sorted(self.listed))
        return ("the server's own and localhost's (--cors-origins adds others)" if not listed
                else f"the server's own, localhost's and {listed}")

    def refusal(self, origin: str) -> str:
        """Why a page at `origin` gets 403."""
        return (f"origin {origin!r} may not call this server from a browser: it allows its "
                "own origin and localhost origins, and the operator adds others with "
                "--cors-origins (FFWD_CORS_ORIGINS)")


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header `name` (lower case), or None."""
    for key, value in headers:
        if key == name:
            return value
    return None
