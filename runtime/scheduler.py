"""Two schedulers, one set of jobs.

The jobs (`runtime.jobs`) are the same functions in both modes; only who runs
them differs:

- `celery` (production): a worker with beat on the Redis broker runs the periodic jobs and the
  one-off ones (alert delivery, the flap-window check). Periodic tasks carry `expires`, so a
  stopped worker doesn't come back to a backlog that fires all at once.
- `inprocess` (the embedded mode): each serving process runs the periodic jobs as asyncio tasks
  beside its requests, and the one-off jobs in a few threads (they are sync: ORM and HTTP).

Either way nothing here runs on a request's path: a request only hands work over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from gateway.aio import spawn
from runtime import jobs
from runtime.gateway import Gateway
from runtime.jobs import Periodic

logger = logging.getLogger(__name__)

# A one-off job that no worker picks up within this long is dropped by the broker (the event
# stays in the database with its status, so nothing is lost from the record).
ONE_OFF_EXPIRES_S = 3600


def uses_celery() -> bool:
    return settings.BACKGROUND_JOBS == "celery"


_threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="failover-jobs")
# What this process's threads hold: the jobs handed over, and those waiting on a countdown.
_handed: set[Future[None]] = set()
_waiting: set[threading.Thread] = set()  # threading.Timer, each
_held = threading.Lock()


def run_one_off(name: str, *args: Any) -> None:
    """Run a one-off job here and now (sync; a worker's task or one of this process's threads)."""
    try:
        jobs.ONE_OFF[name](*args)
    except Exception:
        logger.exception("background job %s%r failed", name, args)
    finally:
        close_old_connections()


def enqueue(name: str, *args: Any, countdown: float = 0.0, local: bool = False) -> None:
    """Hand a one-off job over, without waiting: to a Celery worker, or to this process's
    threads. `local` keeps it here even in the Celery mode (an alert that Celery itself is
    down). Publishing to the broker happens on a thread too, so a stalled broker never holds
    up the caller (the database thread of a serving process)."""
    assert name in jobs.ONE_OFF, name
    if uses_celery() and not local:
        _submit(_publish, name, args, countdown)
    else:
        _run_here(name, args, countdown)


def _publish(name: str, args: tuple[Any, ...], countdown: float) -> None:
    try:
        # Here, not at the top: only a process that hands jobs to Celery loads it (an embedded
        # one never does, and starts a tenth of a second sooner for it).
        from runtime.celery_app import app as celery_app

        celery_app.send_task(
            f"failover.{name}",
            args=args,
            countdown=countdown,
            expires=countdown + ONE_OFF_EXPIRES_S,
        )
    except Exception:  # the broker is unreachable: do it here rather than not at all
        logger.exception("could not queue %s on Celery; running it in this process", name)
        _run_here(name, args, countdown)


def _run_here(name: str, args: tuple[Any, ...], countdown: float) -> None:
    if countdown > 0:
        timer = threading.Timer(countdown, _hand_over_after, args=(name, args))
        timer.daemon = True
        with _held:
            _waiting.add(timer)
        timer.start()
    else:
        _submit(run_one_off, name, *args)


def _hand_over_after(name: str, args: tuple[Any, ...]) -> None:
    with _held:
        _waiting.discard(threading.current_thread())  # the timer itself
    _submit(run_one_off, name, *args)


def _submit(*call: Any) -> None:
    future = _threads.submit(*call)
    with _held:
        _handed.add(future)
    future.add_done_callback(_forget)


def _forget(future: Future[None]) -> None:
    with _held:
        _handed.discard(future)


def one_off_jobs_settle(timeout_s: float) -> int:
    """Let the one-off jobs this process's threads hold finish, waiting up to `timeout_s`
    (a stopping process: an alert being delivered gets its chance); those still waiting on a
    countdown are cancelled, as the process's end would drop them. Returns how many were left
    unfinished."""
    with _held:
        timers = [timer for timer in _waiting if isinstance(timer, threading.Timer)]
        _waiting.clear()
    for timer in timers:
        timer.cancel()
    deadline = time.monotonic() + timeout_s
    while True:
        with _held:
            handed = list(_handed)
        if not handed:
            return 0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return len(handed)
        futures_wait(handed, timeout=remaining)


class InProcessScheduler:
    """The periodic jobs as asyncio tasks on a serving process's loop."""

    # A job still running this long after the stop is left behind: shutdown goes on to the
    # ledger's flush, which must not wait on a health check.
    STOP_TIMEOUT_S = 10.0

    def __init__(self, gateway: Gateway, periodic: tuple[Periodic, ...] | None = None) -> None:
        self.gateway = gateway
        self.jobs = periodic if periodic is not None else jobs.PERIODIC
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        if not self._tasks:
            self._stopping = False
            self._tasks = [spawn(self._every(job)) for job in self.jobs]

    async def _every(self, periodic: Periodic) -> None:
        # The flag, not only the cancellation, ends the loop: a job caught in a database call
        # (`sync_to_async`) finishes that call and swallows the cancellation.
        while not self._stopping:
            try:
                await periodic.job(self.gateway)
            except Exception:
                logger.exception("background job %s failed", periodic.name)
            if self._stopping:
                break
            await asyncio.sleep(periodic.every_s)

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            _, left = await asyncio.wait(self._tasks, timeout=self.STOP_TIMEOUT_S)
            for task in left:
                logger.warning("background job task %s did not stop in time", task.get_name())
        for task in self._tasks:
            if task.done() and not task.cancelled():
                with contextlib.suppress(Exception):
                    task.result()
        self._tasks = []


def serving_process_jobs() -> tuple[Periodic, ...]:
    """What a serving process runs itself: everything in the in-process mode; with Celery, the
    watch on the sentinel (an alert that the workers have stopped can't come from them) and
    the probes at each cooldown's end."""
    if not uses_celery():
        return jobs.PERIODIC
    return (jobs.SENTINEL_WATCH, jobs.RECOVERY)
