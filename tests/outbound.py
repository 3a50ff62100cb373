"""For the outbound URL policy's tests: host names that resolve on this machine only, and a
server that answers every request with a redirect.

Every resolver the gateway uses ends in `socket.getaddrinfo`: the save-time validator calls it,
asyncio's `getaddrinfo` (httpx's network backend) and aiohttp's threaded resolver run it in a
thread. `LocalDns` answers a table of names there, each with one answer or a sequence of them
(a name that rebinds between two lookups), lets IP addresses and "localhost" through to the
real resolver, and answers every other name as unknown: no test asks the internet's DNS.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from devtools.fake_provider.server import LoopbackServer


class LocalDns:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []
        self._real = socket.getaddrinfo
        monkeypatch.setattr(socket, "getaddrinfo", self._getaddrinfo)

    def add(self, name: str, *addresses: str) -> None:
        """`name` resolves to `addresses`, every time."""
        self._answers[name] = [list(addresses)]

    def rebind(self, name: str, *answers: str) -> None:
        """`name` resolves to each of `answers` in turn, one lookup each; the last one stays."""
        self._answers[name] = [[answer] for answer in answers]

    def names(self) -> set[str]:
        return set(self._answers)

    def _getaddrinfo(
        self,
        host: Any,
        port: Any,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in self._answers:
            if name == "localhost" or _is_address(name):
                return self._real(host, port, family, type, proto, flags)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        self.lookups.append(name)
        answers = self._answers[name]
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        number = int(port or 0)
        infos = []
        for address in addresses:
            inet6 = ":" in address
            address_family = socket.AF_INET6 if inet6 else socket.AF_INET
            if family not in (0, address_family):
                continue
            sockaddr = (address, number, 0, 0) if inet6 else (address, number)
            infos.append((address_family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
        if not infos:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return infos


def _is_address(name: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in name else socket.AF_INET, name)
    except OSError:
        return False
    return True


class RedirectApp:
    """An ASGI app answering every request with a 302 to `location`, counting them."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.requests = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        while (await receive()).get("more_body"):
            pass
        headers = [(b"location", self.location.encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 302, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


class RedirectServer(LoopbackServer):
    """`RedirectApp` on 127.0.0.1, for as long as it is started."""

    label = "redirecting server"

    def __init__(self, location: str) -> None:
        self.redirect = RedirectApp(location)
        super().__init__(self.redirect, host="127.0.0.1", port=0)

    @property
    def requests(self) -> int:
        return self.redirect.requests
