"""Stopping without cutting anyone off: the first SIGTERM (or Ctrl-C) starts a drain.

While it drains the server keeps listening, so that probes get an answer rather than a refused
connection: ``/health`` answers 503 (a load balancer or Kubernetes' readiness probe stops
sending requests), a new request gets 503 with Retry-After, and the requests in flight (streams
included) run to their end. The process exits 0 when the last one ends, or when the grace
period has passed (what is still in flight is then cut). A second signal exits at once.
"""
from __future__ import annotations

import logging
import time

import uvicorn

# uvicorn's server log, which it configures to show at info: the drain is part of its stop.
log = logging.getLogger("uvicorn.error")

# Paths that answer while draining: probes and scrapers (/health says it drains).
PROBES = ("/health", "/metrics")


class Drain:
    """Whether the server drains, and the requests in flight it waits for."""

    def __init__(self, grace_period: float):
        self.grace_period = grace_period
        self.in_flight = 0
        self._deadline: float | None = None

    @property
    def draining(self) -> bool:
        return self._deadline is not None

    def start(self) -> None:
        self._deadline = time.monotonic() + self.grace_period
        log.info("draining: %d request(s) in flight, waiting up to %.0f s for them",
                 self.in_flight, self.grace_period)

    def over(self) -> bool:
        """Whether a drain has started and nothing is left to wait for."""
        if self._deadline is None:
            return False
        if self.in_flight == 0:
            return True
        if time.monotonic() >= self._deadline:
            log.warning("grace period of %.0f s over: %d request(s) still in flight are cut",
                        self.grace_period, self.in_flight)
            return True
        return False


class Draining:
    """ASGI middleware: counts the requests in flight (probes left out) and refuses new ones
    with 503 while the server drains."""

    def __init__(self, app, drain: Drain, refusal):
        self.app, self.drain, self.refusal = app, drain, refusal

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in PROBES:
            return await self.app(scope, receive, send)
        if self.drain.draining:
            return await self.refusal(scope, receive, send)
        self.drain.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.in_flight -= 1


class DrainingServer(uvicorn.Server):
    """uvicorn's server, its first exit signal starting ``drain`` instead of a shutdown.

    uvicorn itself stops listening at once, waits a fixed time and then re-raises the signal,
    so that the process ends by it: a container's stop would read as a crash."""

    def __init__(self, config: uvicorn.Config, drain: Drain):
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig, frame) -> None:
        if self.drain.draining:  # a second signal: stop now
            self.should_exit = self.force_exit = True
        else:
            self.drain.start()

    async def on_tick(self, counter: int) -> bool:
        if self.drain.over():
            self.should_exit = True
        return await super().on_tick(counter)
