"""Reading a request body: bounded in size, strict JSON, bounded in depth, valid Unicode.

`read_json` returns the body as a JSON object or raises `APIError`: 413 past
`max_bytes`, 400 (code ``invalid_json``) for anything that is not strict JSON
(``NaN``/``Infinity``, numbers that overflow, integers of thousands of
digits), for nesting deeper than `MAX_DEPTH`, and for strings that are not
valid Unicode (a lone UTF-16 surrogate such as ``"\\ud800"``). The 400s name
the offending parameter in the API's own notation (``messages[0].content``).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

from ffwd.serve.errors import APIError, bad_request, json_type, param_name

MAX_DEPTH = 64  # objects and arrays inside each other (tool schemas nest; 64 is plenty)


async def read_json(
    stream: AsyncIterator[bytes], content_length: str | None, max_bytes: int
) -> dict[str, Any]:
    """The body of a request as a JSON object (see the module docstring)."""
    raw = await _read_bounded(stream, content_length, max_bytes)
    try:
        body = json.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        raise _depth_error("") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        msg = f"the request body is not valid JSON: {exc}"
        raise bad_request(msg, code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request(
            f"the request body must be a JSON object, got {json_type(body)}", code="invalid_json"
        )
    check_value(body)
    return body


async def _read_bounded(
    stream: AsyncIterator[bytes], content_length: str | None, max_bytes: int
) -> bytes:
    if content_length is not None and content_length.isdigit() and int(content_length) > max_bytes:
        raise _too_large(int(content_length), max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in stream:
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(size, max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, max_bytes: int) -> APIError:
    return APIError(
        413, f"the request body is {size} bytes or more; this server accepts at most "
        f"{max_bytes} bytes (--max-body-bytes)", code="request_too_large",
    )


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def check_value(body: dict[str, Any]) -> None:
    """Raise a 400 for nesting past `MAX_DEPTH`, invalid Unicode or a non-finite number.

    >>> check_value({"messages": [{"content": "\\ud800 hi"}]})
    Traceback (most recent call last):
    ...
    ffwd.serve.errors.APIError: 'messages[0].content': the string is not valid Unicode (a lone \
UTF-16 surrogate, U+D800)
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(body, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, float) and not math.isfinite(value):
            raise bad_request(f"'{param_name(path)}': the number is too large",
                              param=param_name(path), code="invalid_json")
        elif isinstance(value, dict | list):
            if len(path) >= MAX_DEPTH:
                raise _depth_error(param_name(path))
            if isinstance(value, dict):
                for key, item in value.items():
                    _check_text(key, path)
                    stack.append((item, (*path, key)))
            else:
                stack.extend((item, (*path, i)) for i, item in enumerate(value))


def _check_text(text: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = param_name(path)
        bad = f"U+{ord(text[exc.start]):04X}"
        raise bad_request(
            f"'{where}': the string is not valid Unicode (a lone UTF-16 surrogate, {bad})",
            param=where or None, code="invalid_unicode",
        ) from None


def _depth_error(where: str) -> APIError:
    at = f" at '{where}'" if where else ""
    return bad_request(
        f"the request body nests objects and arrays more than {MAX_DEPTH} deep{at}",
        param=where or None, code="invalid_json",
    )
