"""Who is calling, and may they: the client key, the origin, the permissions and the rate limit.

Checked before a request is routed, on the snapshot (no SQL): a refused request calls no
provider and charges no budget. Only a key the snapshot doesn't know is looked up (bounded, by
its digest, in the runtime) before it is refused, so a key made a moment ago works at once.
The caller's identity is its key's client app, never a header it sets; without a key, a
request is anonymous if the policy allows that (a public website widget), limited per client
address. Refusals: 401 for a missing, unknown or revoked key, 403 for what the app may not do
(an origin, a provider by name, priority "high", the status), 429 with Retry-After at a rate
limit.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from edge.api.json_body import ApiError
from gateway.engine.clients import ClientConfig, Clients, key_digest
from gateway.engine.config import Snapshot
from gateway.engine.rate import Limits, Verdict
from gateway.routing.ports import Ports
from gateway.routing.rate_limits import RateTicket, rate_admit

logger = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
# The caller's address when the gateway can't vouch for one: every such caller shares it (one
# anonymous rate window, one log-in count) and no allow-list names it.
UNVERIFIED = "unverified"
UNKNOWN = "unknown"  # no peer address at all (a Unix socket)
# A key longer than this is no key of ours: refused before it is hashed.
MAX_KEY_LENGTH = 200

# What the database says of a key (by its digest) the snapshot doesn't know.
KeyFind = Callable[[str], Awaitable[Clients]]


@dataclass(frozen=True, slots=True)
class Caller:
    name: str  # the client app's name, or "anonymous"
    app: ClientConfig | None  # None: anonymous
    subject: str  # whose rate window it counts in
    limits: Limits
    allow_cloud: bool


@dataclass(frozen=True, slots=True)
class Refusal:
    error: ApiError
    headers: dict[str, str] = field(default_factory=dict)


def presented_key(request: HttpRequest) -> str | None:
    """The key as the caller sent it: `Authorization: Bearer …` (what OpenAI's SDKs send) or
    `X-Api-Key`; None when neither is there."""
    # Read from META, not `request.headers`: that builds a dict of every header per request.
    authorization = request.META.get("HTTP_AUTHORIZATION", "")
    if authorization:
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
        return ""  # something else in the header: not a key of ours
    key = request.META.get("HTTP_X_API_KEY")
    return key.strip() if key is not None else None


def client_address(request: HttpRequest) -> str:
    """The caller's address, as the gateway can vouch for it (the anonymous limits, the probes'
    detail, the metrics' allow-list and the admin's log-in count all take it from here).

    With TRUSTED_PROXY_HOPS=N the N-th entry of X-Forwarded-For from the right: the address
    the outermost trusted proxy saw (each proxy appends its peer; anything before that the
    client wrote). Fewer entries than N: the request didn't come through every proxy, and
    `UNVERIFIED`; no X-Forwarded-For at all: it came straight here, and the peer's address.
    With N=0 the peer's address. The peer is the ASGI server's `client`, which its own
    proxy-header handling (uvicorn's, on by default) may have replaced with an entry of the
    header: such a peer is `UNVERIFIED` too, and the operator is told once (run uvicorn with
    --no-proxy-headers). What isn't an IP address (with a port or brackets, maybe) is also
    `UNVERIFIED`: never a pass for an allow-list, nor a fresh rate window per spelling."""
    meta = request.META
    forwarded: str = meta.get("HTTP_X_FORWARDED_FOR", "")
    peer: str = meta.get("REMOTE_ADDR") or ""
    hops: int = settings.TRUSTED_PROXY_HOPS
    # A plain substring test first: most requests name no entry that could be the peer.
    if forwarded and peer and peer in forwarded and _peer_from_header(forwarded, peer, meta):
        rewritten_peer_reported(hops=hops)
        if not hops:
            return UNVERIFIED
    if hops:
        entries = [entry for entry in (part.strip() for part in forwarded.split(",")) if entry]
        if len(entries) >= hops:
            return address_parse(entries[-hops]) or UNVERIFIED
        if entries:
            return UNVERIFIED
    if not peer:
        return UNKNOWN
    return address_parse(peer) or UNVERIFIED


def address_parse(entry: str) -> str | None:
    """An address as a proxy or the server writes one (`203.0.113.7`, `203.0.113.7:5123`,
    `2001:db8::7`, `[2001:db8::7]:443`), in its one spelling (an IPv4-mapped IPv6 address as
    IPv4); None for anything else. A zone (`%eth0`) is dropped: it names an interface of the
    host that wrote it."""
    host, _ = _host_port(entry.strip())
    try:
        parsed = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


@functools.cache
def rewritten_peer_reported(*, hops: int) -> None:
    """Logged once per process (per TRUSTED_PROXY_HOPS): the server took the peer's address
    from X-Forwarded-For."""
    if hops:
        logger.warning(
            "The server took the client's address from X-Forwarded-For (uvicorn's proxy "
            "headers): the gateway reads that header itself (TRUSTED_PROXY_HOPS=%s), but the "
            "server's own view and access log name whatever a client wrote there. Run uvicorn "
            "with --no-proxy-headers.",
            hops,
        )
        return
    logger.error(
        "The server took the client's address from X-Forwarded-For, a header the client "
        "writes (uvicorn's proxy headers): every such caller counts as one unverified address "
        "(one anonymous rate window, one log-in count, no allow-list passed). Run uvicorn with "
        "--no-proxy-headers, and behind a proxy set TRUSTED_PROXY_HOPS to the number of "
        "proxies in front."
    )


def _peer_from_header(forwarded: str, peer: str, meta: dict[str, Any]) -> bool:
    """Whether the peer is one of the header's entries, port and all, as uvicorn's
    ProxyHeadersMiddleware sets it (the entry's host, and its port or 0). A connection's own
    port is never 0, and a port that matches too is the entry, not a coincidence of hosts."""
    try:
        port = int(meta.get("REMOTE_PORT") or 0)
    except (TypeError, ValueError):
        port = 0
    for entry in forwarded.split(","):
        if peer in entry:
            host, entry_port = _host_port(entry.strip())
            if host == peer and port in (0, entry_port):
                return True
    return False


def _host_port(entry: str) -> tuple[str, int]:
    """An entry's host and port (0 when it has none), split as uvicorn splits it: what it
    can't split is all host."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return entry, 0
        return host, _port(rest[1:]) if rest else 0
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        try:
            return host, int(port)
        except ValueError:
            return entry, 0
    return entry, 0


def _port(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def address_subject(address: str) -> str:
    """Whose window an anonymous request counts in: its IPv4 address, or its IPv6 /64 (one
    host usually holds a whole /64, and could otherwise take a fresh address a request)."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def _unauthorized(code: str, message: str) -> Refusal:
    return Refusal(
        ApiError(401, code, message), {"WWW-Authenticate": 'Bearer realm="failover-gateway"'}
    )


def identify(request: HttpRequest, snapshot: Snapshot) -> Caller | Refusal:
    """The caller by its key (or anonymous, where the policy allows), and its origin checked."""
    key = presented_key(request)
    origin = _origin(request)
    policy = snapshot.policy
    if key is None:
        if not policy.anonymous_access:
            return _unauthorized(
                "missing_api_key",
                "Send your client key as 'Authorization: Bearer <key>' or 'X-Api-Key: <key>'.",
            )
        if policy.anonymous_origins and origin not in policy.anonymous_origins:
            return Refusal(
                ApiError(403, "origin_not_allowed", "This origin may not call without a key.")
            )
        return Caller(
            name=ANONYMOUS,
            app=None,
            subject=f"ip:{address_subject(client_address(request))}",
            limits=Limits(policy.anonymous_requests_per_minute, policy.anonymous_tokens_per_minute),
            allow_cloud=policy.anonymous_allow_cloud,
        )
    return _keyed(_digest(key), origin, snapshot.clients)


async def identify_or_find(
    request: HttpRequest, snapshot: Snapshot, find: KeyFind
) -> Caller | Refusal:
    """`identify`, with a key the snapshot doesn't know looked up by `find` before it is
    refused. A key the snapshot knows (or knows to refuse) costs nothing more."""
    key = presented_key(request)
    if key is None:
        return identify(request, snapshot)
    digest = _digest(key)
    clients = snapshot.clients
    if digest and digest not in clients.by_digest and digest not in clients.refused:
        clients = await find(digest)
    return _keyed(digest, _origin(request), clients)


def _origin(request: HttpRequest) -> str:
    return request.META.get("HTTP_ORIGIN", "").rstrip("/").lower()


def _digest(key: str) -> str:
    return key_digest(key) if 0 < len(key) <= MAX_KEY_LENGTH else ""


def _keyed(digest: str, origin: str, clients: Clients) -> Caller | Refusal:
    """The caller whose key has this digest (empty: no key of ours), judged by `clients`."""
    app = clients.by_digest.get(digest)
    if app is None:
        if digest and digest in clients.refused:
            return _unauthorized("revoked_api_key", "This client key has been revoked or disabled.")
        return _unauthorized("invalid_api_key", "This client key is not valid.")
    if origin and origin not in app.allowed_origins:
        return Refusal(
            ApiError(403, "origin_not_allowed", "This key may not be used from this origin.")
        )
    return Caller(
        name=app.name,
        app=app,
        subject=f"app:{app.name}",
        limits=Limits(app.requests_per_minute, app.tokens_per_minute),
        allow_cloud=app.allow_cloud,
    )


def permitted(caller: Caller, *, prefer: str = "", priority: str = "normal") -> Refusal | None:
    """What the request asks for that its caller may not: a provider by name, priority high."""
    if prefer and (caller.app is None or not caller.app.may_ask_for(prefer)):
        return Refusal(
            ApiError(
                403,
                "model_not_allowed",
                f"This client may not ask for '{prefer}' by name: use \"auto\".",
                "model",
            )
        )
    if priority == "high" and (caller.app is None or not caller.app.allow_high_priority):
        return Refusal(
            ApiError(
                403,
                "priority_not_allowed",
                'This client may not send priority "high".',
                "priority",
            )
        )
    return None


async def rate_checked(ports: Ports, caller: Caller) -> RateTicket | Refusal | None:
    """The caller's place in its rate window (None when it has no limit), or the 429."""
    if not caller.limits.any:
        return None
    admitted = await rate_admit(ports, caller.subject, caller.limits)
    if isinstance(admitted, RateTicket):
        return admitted
    return _too_many(caller, admitted)


def _too_many(caller: Caller, verdict: Verdict) -> Refusal:
    if verdict.kind == "tokens":
        what = f"{caller.limits.tokens_per_minute} tokens a minute"
    else:
        what = f"{caller.limits.requests_per_minute} requests a minute"
    return Refusal(
        ApiError(
            429,
            "rate_limit_exceeded",
            f"Rate limit reached ({what}): retry after {verdict.retry_after_s} s.",
        ),
        {"Retry-After": str(verdict.retry_after_s)},
    )
