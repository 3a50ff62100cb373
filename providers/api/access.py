"""Who is calling, and may they: the client key, the origin, the permissions and the rate limit.

Checked before a request is routed, on the snapshot (no SQL): a refused request calls no
provider and charges no budget. The caller's identity is its key's client app, never a header
it sets; without a key, a request is anonymous if the policy allows that (a public website
widget), limited per client address. Refusals: 401 for a missing, unknown or revoked key, 403
for what the app may not do (an origin, a provider by name, priority "high", the status), 429
with Retry-After at a rate limit.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from django.conf import settings
from django.http import HttpRequest

from providers.api.json_body import ApiError
from providers.engine.clients import ClientConfig, key_digest
from providers.engine.config import Snapshot
from providers.engine.rate import Limits, Verdict
from providers.routing.ports import Ports
from providers.routing.rate_limits import RateTicket, rate_admit

ANONYMOUS = "anonymous"
# A key longer than this is no key of ours: refused before it is hashed.
MAX_KEY_LENGTH = 200


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
    """The caller's address: the peer's, or behind TRUSTED_PROXY_HOPS proxies the entry of
    X-Forwarded-For the nearest of them wrote (the ones before it, the client can forge)."""
    hops = settings.TRUSTED_PROXY_HOPS
    if hops:
        forwarded = [a.strip() for a in request.headers.get("X-Forwarded-For", "").split(",")]
        forwarded = [a for a in forwarded if a]
        if len(forwarded) >= hops:
            return forwarded[-hops][:64]
    return str(request.META.get("REMOTE_ADDR") or "unknown")


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
    origin = request.META.get("HTTP_ORIGIN", "").rstrip("/").lower()
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
    digest = key_digest(key) if 0 < len(key) <= MAX_KEY_LENGTH else ""
    app = snapshot.clients.by_digest.get(digest)
    if app is None:
        if digest and digest in snapshot.clients.refused:
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
