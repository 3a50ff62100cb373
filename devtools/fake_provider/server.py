"""`FakeProvider`: the fake provider served by uvicorn on a background thread, for the tests and
the benchmarks. `start` returns once the port accepts connections; `stop` returns once it is
closed, dropping any connection still open (a hanging call's client sees the connection reset).
`start` after `stop` serves on the same port again. `refuse` closes the listener for a while
and drops every connection (the client sees "connection refused", then the port serves again).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

import uvicorn

from devtools.fake_provider import thinking
from devtools.fake_provider.app import FakeProviderApp
from devtools.fake_provider.config import DEFAULT_MODELS, FakeConfig
from devtools.fake_provider.state import FakeState
from devtools.fake_provider.thinking import ReceivedThinking

_TIMEOUT = 10.0


def uvicorn_config(app: FakeProviderApp, **options: Any) -> uvicorn.Config:
    """Uvicorn set up for speed: httptools and uvloop when installed, no access log."""
    return uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        http="auto",
        loop="auto",
        **options,
    )


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A restart binds the same port again while the old connections sit in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class FakeProviderServer(uvicorn.Server):
    """Uvicorn's server on a pre-bound socket, dropping its connections when it stops."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._address: tuple[str, int] | None = None
        self._refusing = False
        self._reopening: asyncio.Task[None] | None = None

    def run_until_stopped(self, sock: socket.socket) -> None:
        try:
            self.run(sockets=[sock])
        finally:
            sock.close()
            self.ready.set()  # unblocks `start` when startup failed

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.loop = asyncio.get_running_loop()
        if sockets:
            self._address = sockets[0].getsockname()[:2]
        state = getattr(self.config.app, "state", None)
        if isinstance(state, FakeState):
            state.refuser = self.refuse_for
        self.ready.set()

    async def refuse_for(self, seconds: float, keep: object = None) -> bool:
        """Close the listener and drop every connection but `keep` at once, then listen on the
        same address again `seconds` later (unless the server stops first); False when it is
        refusing already. Returns once the listener is closed."""
        if self._refusing or self._address is None:
            return False
        self._refusing = True
        for server in self.servers:
            server.close()
        self._drop_connections(keep)
        # Kept: the loop holds only a weak reference to a task.
        self._reopening = asyncio.get_running_loop().create_task(self._reopen_after(seconds))
        return True

    async def _reopen_after(self, seconds: float) -> None:
        try:
            deadline = asyncio.get_running_loop().time() + seconds
            while not self.should_exit and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(min(0.05, seconds))
            if self.should_exit or self._address is None:
                return
            sock = bind_socket(*self._address)
            sock.listen(self.config.backlog)
            server = await asyncio.get_running_loop().create_server(
                self._protocol, sock=sock, backlog=self.config.backlog
            )
            self.servers = [server]
        finally:
            self._refusing = False

    def _protocol(self) -> asyncio.Protocol:
        # What uvicorn's own startup hands to create_server.
        protocol: asyncio.Protocol = self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol

    async def drop_connections(self) -> None:
        self._drop_connections()

    @property
    def refusing(self) -> bool:
        return self._refusing

    def _drop_connections(self, keep: object = None) -> None:
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None and transport is not keep:
                transport.abort()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # A provider that goes away drops its connections: without this, a hanging call would
        # hold the graceful shutdown until its client gave up.
        for server in self.servers:
            server.close()
        self._drop_connections()
        await super().shutdown(sockets=sockets)


class LoopbackServer:
    """An ASGI app served by uvicorn on a background thread for as long as it is started;
    usable as a context manager. The fake provider and the alerts' fake receiver are these."""

    label = "server"

    def __init__(self, app: Any, *, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: FakeProviderServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> Self:
        if self._thread is not None:
            return self
        sock = bind_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        sock.listen(128)
        server = FakeProviderServer(
            uvicorn_config(self.app, log_config=None, timeout_graceful_shutdown=2)
        )
        thread = threading.Thread(
            target=server.run_until_stopped,
            args=(sock,),
            name=f"{self.label.replace(' ', '-')}-{self.port}",
        )
        thread.daemon = True
        thread.start()
        if not server.ready.wait(_TIMEOUT) or not server.started:
            server.should_exit = True
            thread.join(_TIMEOUT)
            raise RuntimeError(f"the {self.label} did not start on {self.url}")
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True  # its loop checks this every 0.1 s
        thread.join(_TIMEOUT)
        if thread.is_alive():
            server.force_exit = True
            thread.join(_TIMEOUT)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class FakeProvider(LoopbackServer):
    """The fake provider on 127.0.0.1 for as long as it is started; usable as a context manager.

    `models`, `api_key`, `text` and any fault field form the config that `reset` returns to.
    """

    label = "fake provider"

    def __init__(
        self,
        *,
        models: Iterable[str] = DEFAULT_MODELS,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        **fault: Any,
    ) -> None:
        defaults = FakeConfig().updated({"models": list(models), "api_key": api_key, **fault})
        self.state = FakeState(defaults)
        super().__init__(FakeProviderApp(self.state), host=host, port=port)

    # Control, in-process: the same fields and checks as POST /_control/fault.

    def set_fault(self, **changes: Any) -> dict[str, Any]:
        return self.state.update(changes).to_dict()

    @property
    def config(self) -> FakeConfig:
        return self.state.config

    @property
    def calls(self) -> int:
        return self.state.calls

    def calls_to(self, path: str) -> int:
        return self.state.calls_to(path)

    def stats(self) -> dict[str, Any]:
        return self.state.stats()

    def last_request(self, path: str) -> dict[str, Any] | None:
        """What the last call to `path` carried: {"body": its decoded JSON, "headers": {lower-case
        name: value}}; None when it has not been called since the last `reset`."""
        return self.state.last_request(path)

    def thinking_received(self, path: str) -> tuple[ReceivedThinking, ...]:
        """The thinking the last call to `path` carried back in its messages (Anthropic's
        thinking blocks, each saying whether this fake signed it; Ollama's `thinking`;
        OpenAI-compatible `reasoning_content`), in order; () when it carried none or there was
        no call."""
        last = self.state.last_request(path)
        if last is None:
            return ()
        return thinking.received(last["body"], self.state.config.signature_key)

    def reset(self) -> None:
        self.state.reset()

    def restore(self) -> None:
        """As if just started, on the same port: running (a stopped fake starts again, a refusing
        one is restarted), every connection dropped (a hanging call ends), the config and the
        counts its own again. For a harness that shares one fake between tests."""
        server = self._server
        loop = server.loop if server is not None and not server.refusing else None
        if server is None or loop is None:
            self.stop()
            self.start()
        else:
            asyncio.run_coroutine_threadsafe(server.drop_connections(), loop).result(_TIMEOUT)
        self.reset()

    def refuse(self, seconds: float) -> bool:
        """Refuse connections for `seconds` (as POST /_control/refuse does); returns once the
        listener is closed; False when it is refusing already."""
        server = self._server
        if server is None or server.loop is None:
            raise RuntimeError("the fake provider is not running")
        future = asyncio.run_coroutine_threadsafe(server.refuse_for(seconds), server.loop)
        return future.result(_TIMEOUT)
