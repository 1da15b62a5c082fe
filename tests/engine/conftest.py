"""Fixtures of the engine tier: the official SDKs over a module's `app` (each SDK test
module defines its own `app` fixture, the real `ModelService` on a tiny model)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from fastapi.testclient import TestClient
from openai import OpenAI


@pytest.fixture(scope="module")
def http(app: Any) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def oai(http: TestClient) -> OpenAI:
    return OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)


@pytest.fixture(scope="module")
def claude(http: TestClient) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=http,
                               max_retries=0)
