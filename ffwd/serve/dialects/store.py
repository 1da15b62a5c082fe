"""Finished Responses API responses, kept for ``previous_response_id`` and retrieval.

A bounded in-memory store: at most `max_entries` responses and `max_bytes` of
their JSON, each for at most `max_age_s` seconds; the oldest go first. Entries
live in their tenant's namespace (`ffwd.serve.middleware.tenant`: the API key
a request presents), so one key's client cannot continue (or read) another's
conversation. The store lives in the process that serves HTTP (the ingress
under ``--replicas``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Defaults (ffwd.config has no setting for them yet).
STORE_MAX_ENTRIES = 1024
STORE_MAX_AGE_S = 3600.0
STORE_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Stored:
    """A response and the conversation it ends: its input and its reply, as the chat
    template reads them (without its instructions, which a follow-up does not inherit)."""

    response: dict[str, Any]
    messages: list[dict[str, Any]]
    size: int
    at: float


class ResponseStore:
    """See the module docstring; safe to use from any thread."""

    def __init__(self, max_entries: int = STORE_MAX_ENTRIES,
                 max_age_s: float = STORE_MAX_AGE_S, max_bytes: int = STORE_MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_age_s, self.max_bytes = max_entries, max_age_s, max_bytes
        self.clock = clock
        self._items: OrderedDict[tuple[str, str], Stored] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, namespace: str, rid: str, response: dict[str, Any],
            messages: list[dict[str, Any]]) -> None:
        size = len(json.dumps(response)) + len(json.dumps(messages))
        if size > self.max_bytes or self.max_entries <= 0:
            return  # larger than the whole store: not kept
        with self._lock:
            self._pop((namespace, rid))
            self._items[(namespace, rid)] = Stored(response, messages, size, self.clock())
            self._bytes += size
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                self._pop(next(iter(self._items)))

    def get(self, namespace: str, rid: str) -> Stored | None:
        with self._lock:
            self._expire()
            return self._items.get((namespace, rid))

    def delete(self, namespace: str, rid: str) -> bool:
        with self._lock:
            self._expire()
            return self._pop((namespace, rid)) is not None

    def _expire(self) -> None:
        limit = self.clock() - self.max_age_s
        while self._items:
            key, first = next(iter(self._items.items()))
            if first.at > limit:
                break
            self._pop(key)

    def _pop(self, key: tuple[str, str]) -> Stored | None:
        gone = self._items.pop(key, None)
        if gone is not None:
            self._bytes -= gone.size
        return gone
