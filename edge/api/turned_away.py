"""A front door's refusal before routing: answered in the endpoint's error shape, and handed to
the runtime's keeper (`runtime/refusals.py`: counted in /metrics, a sample kept where the
control room shows it, logged). A refusal leaves no line in the call ledger: that holds routed
requests.

The doors call one hook: `refused`, from their shared arrival (`edge/api/arrival.py`: the
method, the host, the envelope, the key, the body) and where they refuse after it (a model no
provider serves, what the app may not ask for, a rate limit); the API handler calls
`turned_away` for what it refuses before a view runs (a body too large or too slow, plain HTTP
where HTTPS is required). Only the doors below are counted; a 5xx is no refusal.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest

from edge.api.access import ANONYMOUS, MAX_KEY_LENGTH, Caller, Refusal, presented_key
from edge.api.json_answer import JsonAnswer
from edge.api.json_body import ApiError
from gateway.engine.clients import key_digest
from runtime.gateway import Gateway, NotServing, gateway_of
from runtime.refusals import UNKNOWN_KEY, Refused, note_refusal

DOORS = frozenset(
    {
        "/api/v1/complete",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/embeddings",
    }
)


def refused(
    refusal: Refusal | ApiError,
    render: Callable[[ApiError], JsonAnswer],
    request: HttpRequest,
    caller: Caller | None = None,
    body: bytes = b"",
) -> JsonAnswer:
    """The refusal in the endpoint's error shape (`render`), with its headers; noted as the
    door's (`turned_away`)."""
    if isinstance(refusal, ApiError):
        refusal = Refusal(refusal)
    turned_away(request, refusal.error, caller, body)
    response = render(refusal.error)
    for name, value in refusal.headers.items():
        response[name] = value
    return response


def turned_away(
    request: HttpRequest, error: ApiError, caller: Caller | None = None, body: bytes = b""
) -> None:
    """Hand a door's refusal of `request` to the keeper: the caller's app as the door knows it
    (`caller`), or as the key names it in the snapshot; `body`, when it was read, only to keep
    what the client wrote out of the message. Never waits."""
    if request.path not in DOORS or not 400 <= error.status < 500:
        return
    try:
        gateway: Gateway | None = gateway_of(request)
    except NotServing:
        gateway = None
    key = presented_key(request)
    refusal = Refused(
        door=request.path,
        app=caller.name if caller is not None else _app_of(key, gateway),
        status=error.status,
        code=error.code,
        field=error.field,
        message=error.message,
        secrets=(key,) if key else (),
        body=body,
    )
    note_refusal(refusal, gateway)


def _app_of(key: str | None, gateway: Gateway | None) -> str:
    """The app a key belongs to, by the snapshot in memory (a refusal looks nothing up):
    "anonymous" without one, `UNKNOWN_KEY` for one no enabled app has."""
    if key is None:
        return ANONYMOUS
    snapshot = gateway.snapshots.latest() if gateway is not None else None
    if snapshot is None or not 0 < len(key) <= MAX_KEY_LENGTH:
        return UNKNOWN_KEY
    app = snapshot.clients.by_digest.get(key_digest(key))
    return UNKNOWN_KEY if app is None else app.name
