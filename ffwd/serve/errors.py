"""Errors in each API's shape.

OpenAI's routes answer `{"error": {"message", "type", "param", "code"}}`;
Anthropic's (``/v1/messages`` and below) answer `{"type": "error", "error":
{"type", "message", "param", "code"}}` with Anthropic's error types
(`anthropic_body`). Every error has a non-null ``code``; ``param`` names the
offending request field as the API spells it (``messages[0].content``,
``ffwd.k``), never a validator's internal path.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ffwd.engine.core.scheduler import ShuttingDown

SHUTTING_DOWN = "server_shutting_down"  # the code of a 503 while the server drains


class APIError(Exception):
    """An error that reaches the client with its HTTP status and OpenAI shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str = "invalid_request",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its fields, not from `args`, so it survives pickling
        # (ffwd.deploy ships errors from a replica to the ingress).
        return (_rebuild, (type(self), self.args, self.__dict__))

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message, "type": self.type, "param": self.param, "code": self.code,
            }
        }


ANTHROPIC_PREFIX = "/v1/messages"  # paths whose errors have Anthropic's shape
# HTTP status -> Anthropic's error type (anything else: api_error).
ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
    429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error",
}


def is_anthropic_path(path: str) -> bool:
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def anthropic_body(err: APIError) -> dict[str, Any]:
    """`err` in Anthropic's shape (``param`` and ``code`` kept: they name the field)."""
    kind = ANTHROPIC_TYPES.get(err.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message,
                                       "param": err.param, "code": err.code}}


def error_body(err: APIError, path: str) -> dict[str, Any]:
    """The body of `err` on `path`: Anthropic's shape on its routes, else OpenAI's."""
    return anthropic_body(err) if is_anthropic_path(path) else err.body()


def _rebuild(cls: type[APIError], args: tuple[Any, ...], state: dict[str, Any]) -> APIError:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


def as_api_error(exc: BaseException) -> APIError:
    """What a failed generation tells the client (a 500 unless it was an APIError, or the
    engine draining: a 503 with Retry-After)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ShuttingDown):
        return shutting_down(str(exc))
    return server_error(f"generation failed: {type(exc).__name__}: {exc}")


def shutting_down(message: str) -> APIError:
    """The server is stopping: a 503 the client may retry (elsewhere, or once it is back)."""
    return APIError(503, message, type="server_error", code=SHUTTING_DOWN,
                    headers={"Retry-After": "1"})


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def server_error(message: str) -> APIError:
    return APIError(500, message, type="server_error", code="internal_error")


# pydantic error type -> (OpenAI code, what the field expects, for type errors)
_TYPE_ERRORS = {
    "int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
    "bool_type": "a boolean (true or false)", "string_type": "a string", "list_type": "an array",
    "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
}


def from_validation_error(exc: ValidationError) -> APIError:
    """The first validation problem as a 400 that names the parameter.

    Union members and validator names in pydantic's location are dropped, so
    ``stop.str`` is reported as ``stop`` and ``messages.0.content.str`` as
    ``messages[0].content``.
    """
    errors = exc.errors(include_url=False)
    param = _param(errors[0].get("loc", ()))
    # A union reports one error per member: the deepest under the same field is the one
    # that matches what was sent (a missing name in a tool_choice object, not "a string").
    same = [e for e in errors if (_param(e.get("loc", ())) or "").startswith(param or "")]
    err = max(same, key=lambda e: len(_param(e.get("loc", ())) or ""))
    param = _param(err.get("loc", ()))
    kind = str(err.get("type", ""))
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    code = "invalid_value"
    if kind == "missing":
        msg, code = "is required", "missing_required_parameter"
    elif kind == "extra_forbidden":
        msg, code = "is not a known parameter", "unknown_parameter"
    elif kind in _TYPE_ERRORS:
        msg = f"expected {_TYPE_ERRORS[kind]}, got {json_type(err.get('input'))}"
        code = "invalid_type"
    where = f"'{param}': " if param else ""
    return bad_request(f"{where}{msg}", param=param, code=code)


def _param(loc: tuple[int | str, ...]) -> str | None:
    return param_name([p for p in loc if isinstance(p, int) or not _is_tag(p)]) or None


def _is_tag(part: str) -> bool:
    """Whether a location part is a union member or validator, not a field (`str`, `list[..]`)."""
    return (part in ("str", "int", "float", "bool") or "[" in part or "-" in part
            or part[:1].isupper())  # constrained-str, function-after[...], a union's Tag


def param_name(path: tuple[str | int, ...] | list[str | int]) -> str:
    """A location as the API names it.

    >>> param_name(("messages", 0, "content"))
    'messages[0].content'
    """
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type.

    >>> json_type(True), json_type(3), json_type("x"), json_type(None)
    ('boolean', 'number', 'string', 'null')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
