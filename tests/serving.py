"""A test's gateway handed to the platform as a serving process hands in its own.

The ASGI lifespan builds the process's gateway and puts it in the lifespan state, which the
server copies into each request's scope (`failover_site.asgi`). A test builds its gateway itself
(a fake clock, the pass's store) and serves without the lifespan (no background jobs, no
`gc.freeze()` of the test process), so these do the server's part: the application with the
gateway in each request's state, Django's test client with it in each request's scope, and the
committed configuration changes going to it.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from devtools.ports import free_port
from runtime.gateway import STATE_KEY, Gateway
from runtime.wiring import config_changes_to

Asgi = Any


def handed(application: Asgi, gateway: Gateway) -> Asgi:
    """`application` as a server that ran its lifespan calls it: `gateway` in every request's
    lifespan state."""

    async def served(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            scope = {**scope, "state": {**scope.get("state", {}), STATE_KEY: gateway}}
        await application(scope, receive, send)

    return served


def state_of(gateway: Gateway) -> dict[str, Any]:
    """The lifespan state a request's scope carries."""
    return {STATE_KEY: gateway}


@contextmanager
def serving(gateway: Gateway) -> Iterator[Gateway]:
    """`gateway` as this process's serving one: a change committed here goes to it (the
    version moved, its snapshot marked stale), as the lifespan arranges for its own."""
    with config_changes_to(gateway):
        yield gateway


class StateClient(AsyncClient):
    """Django's async test client with the lifespan state in each request's scope, from
    `client_address` (the peer's address, as the server sees it)."""

    def __init__(self, state: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.client_address = "127.0.0.1"

    async def request(self, **request: Any) -> Any:
        return await super().request(
            state=dict(self.state), client=[self.client_address, 0], **request
        )


class ServingClient:
    """Django's test client over its ASGI handler with `gateway` in each request's scope, for a
    sync test (the views run in the test's thread, on its database connection). A request's
    `REMOTE_ADDR` is the peer's address, as with the WSGI test client."""

    def __init__(self, gateway: Gateway, **kwargs: Any) -> None:
        self.asgi = StateClient(state_of(gateway), **kwargs)

    def get(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self._sent(self.asgi.get, path, *args, **kwargs)

    def post(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self._sent(self.asgi.post, path, *args, **kwargs)

    def generic(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        return self._sent(self.asgi.generic, method, path, *args, **kwargs)

    def _sent(self, send: Any, *args: Any, REMOTE_ADDR: str = "127.0.0.1", **kwargs: Any) -> Any:  # noqa: N803
        self.asgi.client_address = REMOTE_ADDR

        async def sent() -> Any:  # some of the client's methods return their coroutine
            return await send(*args, **kwargs)

        return async_to_sync(sent)()

    def force_login(self, user: Any) -> None:
        self.asgi.force_login(user)

    def logout(self) -> None:
        self.asgi.logout()

    @property
    def session(self) -> Any:
        return self.asgi.session


@asynccontextmanager
async def lifespan_run(
    monkeypatch: Any, *, state: dict[str, Any] | None
) -> AsyncIterator[list[dict[str, Any]]]:
    """The ASGI application's lifespan as a server runs it (with `state` as its lifespan
    state, None for a server that keeps none): started, what it sent back, then shut down.
    Only the start-up's own work runs, no periodic jobs: one caught mid-run by a quick shutdown
    holds it up (asgiref lets a cancelled ORM call finish and swallows the cancellation)."""
    from failover_site import asgi

    monkeypatch.setattr(asgi, "serving_process_jobs", lambda: ())
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        answered.set()

    scope: dict[str, Any] = {"type": "lifespan"}
    if state is not None:
        scope["state"] = state
    await messages.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(asgi.application(scope, messages.get, send))
    try:
        await asyncio.wait_for(answered.wait(), 10)
        yield sent
    finally:
        if not lifespan.done():
            await messages.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(lifespan, 10)
        gc.unfreeze()  # the start-up froze this test process's objects


def uvicorn_serving(
    env: dict[str, str], log_dir: Path, *, workers: int = 1, ready: str = "/healthz"
) -> tuple[str, subprocess.Popen]:
    """The platform served by uvicorn as production runs it (`workers` processes), in a child
    process with `env`, its output in `log_dir`: its URL once `ready` answers 200, and the
    process (the test terminates it)."""
    port = free_port()
    log_path = log_dir / f"uvicorn-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "failover_site.asgi:application",
             "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
             "--workers", str(workers), "--no-proxy-headers",
             "--loop", "failover_site.event_loop:new_event_loop"],
            cwd=Path(__file__).resolve().parents[1], env=env, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert process.poll() is None, log_path.read_text()
        try:
            if httpx.get(f"{url}{ready}", timeout=2).status_code == 200:
                return url, process
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.1)
