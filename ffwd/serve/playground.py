"""The playground page served at ``/`` and ``/playground`` (issue 18: being built)."""

from __future__ import annotations

from fastapi import FastAPI


def install_playground(app: FastAPI) -> None:
    """Add the page's routes to `app` (none yet)."""
