"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class APIError(Exception):
    """An error that reaches the client with its HTTP status and OpenAI shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message, "type": self.type, "param": self.param, "code": self.code,
            }
        }


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def from_validation_error(exc: ValidationError) -> APIError:
    """The first validation problem as a 400 that names the parameter."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err.get("loc", ()) if p not in ("function-after", "function-before")]
    param = ".".join(p if not p.isdigit() else f"[{p}]" for p in loc).replace(".[", "[") or None
    msg = str(err.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if err.get("type") == "missing":
        msg = "is required"
    where = f"'{param}': " if param else ""
    return bad_request(f"{where}{msg}", param=param, code="invalid_value")
