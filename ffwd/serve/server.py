"""Running the app under uvicorn, with a bounded, logged shutdown.

On SIGTERM or SIGINT `run_server` first drains the executor (`LocalExecutor.drain`):
from the signal on, new requests and those still waiting for a sequence get a 503 with
Retry-After and /health answers 503 (``"status": "draining"``, `stop_taking`), the
running ones get `grace` seconds to finish, and what still runs then is cut (a stream
ends with an error event that says so, a whole reply is that 503). One log line says
how many finished, were cut and were refused; then uvicorn closes the connections and
the process exits, within the grace period and a second or two. A second signal exits
at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any, Protocol

import uvicorn

from ffwd.engine.core.scheduler import Drained

log = logging.getLogger("ffwd.serve")
EXIT_S = 2  # what uvicorn may take to close once the runs have ended


class Drainable(Protocol):
    """What stops serving on a signal (`ffwd.serve.execute.LocalExecutor`)."""

    def stop_taking(self) -> None:
        """Refuse new requests from now on (cheap: called in the signal handler)."""
        ...

    def drain(self, grace_s: float) -> Drained:
        """Refuse the waiting, give the running `grace_s` seconds, cut the rest."""
        ...


class DrainingServer(uvicorn.Server):
    """`uvicorn.Server` whose first exit signal drains the executor before uvicorn's own
    shutdown (module docstring)."""

    def __init__(self, config: uvicorn.Config, executor: Drainable, grace: float) -> None:
        super().__init__(config)
        self.executor, self.grace = executor, grace
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining:  # the second signal: uvicorn's own (it exits at once)
            super().handle_exit(sig, frame)
            return
        self._draining = True
        self.executor.stop_taking()  # before anything else: /health says 503 from now on
        log.warning("%s: draining: no new requests; the running ones get %s s to finish",
                    signal.Signals(sig).name, self.grace)
        threading.Thread(target=self._drain, name="ffwd-drain", daemon=True).start()

    def _drain(self) -> None:
        done = self.executor.drain(self.grace)
        log.warning("shut down: %d requests finished, %d cut after the %s s grace period, "
                    "%d refused", done.finished, done.cut, self.grace, done.refused)
        self.should_exit = True  # uvicorn's loop looks at it every tick


def run_server(app: Any, *, host: str, port: int, keep_alive: int, grace: float,
               executor: Drainable) -> None:
    """Serve `app` until a signal, then drain `executor` (module docstring)."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            timeout_keep_alive=keep_alive, timeout_graceful_shutdown=EXIT_S)
    DrainingServer(config, executor, grace).run()
