"""One engine shared by every request: synthesis on one worker thread, interleaved chunk by
chunk.

Each admitted request is a job over its chunk iterator (``Kokoro.stream``). The worker takes
one chunk at a time: first from jobs that have produced nothing yet (oldest first); otherwise
round robin, so a long text does not hold the engine from the others. A stream that has sent
audio also gives way between its engine calls (``turn``, before each decode): jobs still
waiting for their first chunk get it there, so a new request's first audio waits for the
engine call in progress, not for the rest of another stream's chunk (a sentence's text side
and its decode). Chunks go back to the event loop through each job's queue; a job ends with
its last chunk (Chunk.last), where its speaker knows it. A job that its
client gave up on (``cancel``) or whose deadline passed is dropped before its next chunk, and
its iterator closed.

A job holds at most AHEAD chunks that its response has not taken yet: a client that reads
slowly gets its audio as fast as it reads it, the engine goes to the others meanwhile, and
what the process buffers per stream is bounded (docs/deploying.md, Slow readers).
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import AsyncIterator, Callable, Generator

from kokoro_tvm.runtime.speech import Chunk


class QueueFull(Exception):
    """Admitting another job would exceed the scheduler's limit."""


class DeadlineExceeded(Exception):
    """A job ran past its deadline; it was stopped."""


_END = object()
# Chunks a job may have made that its response has not taken: the one being encoded and sent
# is besides them, so a stream always has its next chunk ready when its client reads on.
AHEAD = 2


class Job:
    """One request's synthesis: ``chunks`` runs on the worker thread, its results are read on
    the event loop with ``results()``."""

    def __init__(self, chunks: Generator[Chunk, None, None], deadline: float,
                 loop: asyncio.AbstractEventLoop, wake: threading.Condition):
        self.chunks, self.deadline, self.loop, self._wake = chunks, deadline, loop, wake
        self.queue: asyncio.Queue = asyncio.Queue()
        self.produced = 0
        self.untaken = 0  # chunks made and not yet taken by results() (``_wake`` held)
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        with self._wake:
            self.cancelled.set()
            self._wake.notify()  # the worker drops it, even if it waited for its reader

    def ready(self) -> bool:
        """Whether the worker may take a step of it (``_wake`` held): its reader keeps up, or
        it is to be dropped."""
        return self.untaken < AHEAD or self.cancelled.is_set()

    def _deliver(self, item) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def _deliver_chunk(self, chunk: Chunk) -> None:
        with self._wake:
            self.untaken += 1
        self._deliver(chunk)

    async def results(self) -> AsyncIterator[Chunk]:
        """The job's chunks as they are made; raises what synthesis raised. Closing this
        iterator early (a client that disconnected) cancels the job."""
        try:
            while (item := await self.queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                with self._wake:
                    self.untaken -= 1
                    self._wake.notify()  # room for its next chunk
                yield item
        finally:
            self.cancel()


class Scheduler:
    """The worker thread and its jobs; at most ``max_jobs`` are admitted at once. It is each
    stream's speech.EngineSharing (``alone``, ``turn``)."""

    def __init__(self, max_jobs: int, on_chunk: Callable[[Chunk, float], None] = lambda c, s: None,
                 on_drop: Callable[[str], None] = lambda reason: None):
        self.max_jobs = max_jobs
        self.on_chunk, self.on_drop = on_chunk, on_drop  # for the metrics
        self._jobs: deque[Job] = deque()
        self._current: Job | None = None  # whose chunk the worker is making
        self._inside = 0.0  # seconds of other jobs' chunks made inside the current one's turns
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="synthesis", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return len(self._jobs)

    def alone(self) -> bool:
        """Whether one job at most is admitted now: no other takes turns with it."""
        return len(self._jobs) <= 1

    def turn(self) -> None:
        """Between two engine calls of the current job, on the worker thread: when it has sent
        audio already, every job still waiting for its first chunk makes it now (oldest first).
        Those jobs give way to none (nothing sent yet), so turns do not nest."""
        current = self._current
        if current is None or current.produced == 0:
            return
        while (job := self._waiting_first(current)) is not None:
            self._step(job)

    def submit(self, chunks: Generator[Chunk, None, None], timeout: float) -> Job:
        """A job for ``chunks``, queued; QueueFull if ``max_jobs`` are admitted already."""
        job = Job(chunks, time.monotonic() + timeout, asyncio.get_running_loop(), self._wake)
        with self._wake:
            if len(self._jobs) >= self.max_jobs:
                raise QueueFull
            self._jobs.append(job)
            self._wake.notify()
        return job

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()

    def _next_job(self) -> Job | None:
        """The job to take a chunk from (see the module docstring), None when stopping."""
        with self._wake:
            while not self._stopping:
                job = self._oldest_new() or next((j for j in self._jobs if j.ready()), None)
                if job is not None:
                    return self._to_back(job)
                self._wake.wait()  # no job, or every reader behind: until one takes a chunk
            return None

    def _waiting_first(self, current: Job) -> Job | None:
        """The oldest job besides ``current`` that has produced nothing, moved to the back."""
        with self._wake:
            job = self._oldest_new(besides=current)
            return None if job is None or self._stopping else self._to_back(job)

    def _oldest_new(self, besides: Job | None = None) -> Job | None:
        """The oldest admitted job that has produced nothing (``self._wake`` held)."""
        return next((j for j in self._jobs if j.produced == 0 and j is not besides), None)

    def _to_back(self, job: Job) -> Job:
        """``job`` moved behind the others, who go before its next chunk (``self._wake``
        held)."""
        self._jobs.remove(job)
        self._jobs.append(job)
        return job

    def _drop(self, job: Job, item, reason: str | None = None) -> None:
        with self._wake:
            self._jobs.remove(job)
        job.chunks.close()  # runs the iterator's cleanup on this thread, where it ran
        if reason is not None:
            self.on_drop(reason)
        job._deliver(item)

    def _work(self) -> None:
        while (job := self._next_job()) is not None:
            self._step(job)

    def _step(self, job: Job) -> None:
        """One chunk of ``job`` (or its end), on the worker thread; the chunk's time for the
        metrics leaves out the chunks other jobs made in its turns."""
        if job.cancelled.is_set():
            self._drop(job, _END, "disconnected")
            return
        if time.monotonic() > job.deadline:
            self._drop(job, DeadlineExceeded(), "deadline")
            return
        outer, self._current = self._current, job
        started, inside = time.perf_counter(), self._inside
        try:
            chunk = next(job.chunks)
        except StopIteration:
            self._drop(job, _END)
            return
        except Exception as err:  # noqa: BLE001 - the request's error, not the worker's
            self._drop(job, err)
            return
        finally:
            self._current = outer
            elapsed = time.perf_counter() - started
            own = elapsed - (self._inside - inside)
            self._inside = inside + elapsed if outer is not None else 0.0
        job.produced += 1
        self.on_chunk(chunk, own)
        job._deliver_chunk(chunk)
        if chunk.last:  # its end now, not at its next turn, a round of the others' chunks away
            self._end(job)

    def _end(self, job: Job) -> None:
        """After ``job``'s last chunk: its iterator run out (nothing left but bookkeeping) and
        the end delivered."""
        try:
            for chunk in job.chunks:  # none expected; delivered all the same
                job._deliver_chunk(chunk)
        except Exception as err:  # noqa: BLE001 - the request's error, not the worker's
            self._drop(job, err)
            return
        self._drop(job, _END)
