# ruff: noqa: F811 - the routing fixtures (tests/providers/conftest.py), imported by name
"""A request a front door refuses before routing, through the real endpoints: counted in
/metrics by door, app, code and field, kept (a sample) where the control room shows it, on the
store this pass runs (memory, or Redis); never a key or what the client wrote; and answered at
once whatever Redis does (the rules themselves: test_refusal_rules.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from django.urls import reverse
from django.utils.html import escape

from gateway.state.redis_store import RedisStore
from gateway.state.refusal_log import RefusalNote
from gateway.state.resilient_store import ResilientStore
from runtime import refusals
from runtime.gateway import Gateway, make_store
from tests.failover_site.test_metrics import SCRAPER, TOKEN, parse, value
from tests.providers.conftest import (  # noqa: F401 - the routing fixtures
    api,
    clock,
    gateway,
    primary,
    providers_configured,
    secondary,
)
from tests.serving import StateClient, handed, state_of

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = "/v1/messages"
CHAT = "/v1/chat/completions"
COMPLETE = "/api/v1/complete"
ROBOT_ROLE = {
    "model": "auto",
    "max_tokens": 50,
    "messages": [{"role": "user", "content": "Hi."}, {"role": "robot", "content": "Beep."}],
}
# How the doors write the second message's role: OpenAI's `messages[1].role`, Anthropic's
# `messages.1.role`; either is `messages.*.role` as a label.
SECOND_ROLE = re.compile(r"messages(\[1\]|\.1)\.role")
REFUSED = "failover_refused_requests_total"


@pytest.fixture(autouse=True)
def fresh_sample() -> None:
    """The sample's room is the process's: each test starts with a full burst."""
    refusals.KEEP_RATE.clear()


@pytest.fixture
def metrics_open(settings) -> None:
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_IPS = []


async def metrics_text(api: httpx.AsyncClient) -> str:
    response = await api.get("/metrics", headers=SCRAPER)
    assert response.status_code == 200, response.text
    return response.text


async def kept(gateway: Gateway, until: Callable[[list[RefusalNote]], bool]) -> list[RefusalNote]:
    """The refusals the store holds once `until` says so (handed over off the request's path:
    polled, with a generous deadline)."""
    deadline = time.monotonic() + 20
    while True:
        notes = await gateway.store.refusals_read()
        if until(notes):
            return notes
        assert time.monotonic() < deadline, f"the store holds {notes}"
        await asyncio.sleep(0.05)


async def control_room(gateway: Gateway, admin_user, *, htmx: bool = False) -> str:
    """The refusals page as a staff user gets it from a process serving `gateway`."""
    client = StateClient(state_of(gateway))
    await client.aforce_login(admin_user)
    headers = {"HX-Request": "true"} if htmx else {}
    response = await client.get(reverse("admin:control-refusals"), headers=headers)
    assert response.status_code == 200
    return response.content.decode()


async def test_a_refused_field_is_counted_by_door_app_code_and_field(api, metrics_open):
    before = parse(await metrics_text(api))[0]
    response = await api.post(MESSAGES, json=ROBOT_ROLE)
    assert response.status_code == 400
    assert (
        await api.post(CHAT, json={"model": "auto", "messages": [], "colour": 1})
    ).status_code == 400
    assert (
        await api.post(COMPLETE, content=b"{not json", headers={"Content-Type": "application/json"})
    ).status_code == 400
    count = {"model": "no-such-model", "messages": [{"role": "user", "content": "Hi."}]}
    assert (await api.post(f"{MESSAGES}/count_tokens", json=count)).status_code == 404
    embed = await api.post("/v1/embeddings", json={"model": "auto", "input": []})
    responses = await api.post("/v1/responses", json={"model": "auto", "input": "Hi.", "zz": 1})
    assert (embed.status_code, responses.status_code) == (400, 400)
    after = parse(await metrics_text(api))[0]
    role = {"door": MESSAGES, "app": "suite", "code": "invalid_field", "field": "messages.*.role"}
    assert value(after, REFUSED, **role) - value(before, REFUSED, **role) == 1
    unknown = {"door": CHAT, "app": "suite", "code": "invalid_field", "field": "colour"}
    assert value(after, REFUSED, **unknown) - value(before, REFUSED, **unknown) == 1
    bad_json = {"door": COMPLETE, "app": "suite", "code": "invalid_json", "field": ""}
    assert value(after, REFUSED, **bad_json) - value(before, REFUSED, **bad_json) == 1
    model = {"door": f"{MESSAGES}/count_tokens", "code": "model_not_found", "field": "model"}
    assert value(after, REFUSED, **model) - value(before, REFUSED, **model) == 1
    for door, field in (("/v1/embeddings", "input"), ("/v1/responses", "zz")):
        labels = {"door": door, "app": "suite", "field": field}
        assert value(after, REFUSED, **labels) - value(before, REFUSED, **labels) == 1, labels
    assert value(after, "failover_requests_total") == value(before, "failover_requests_total")


async def test_who_is_refused_before_the_key_is_read_is_named_by_the_key(
    api, metrics_open, settings
):
    settings.BODY_LIMIT_CHAT_BYTES = 1024
    before = parse(await metrics_text(api))[0]
    too_large = await api.post(CHAT, json={"model": "auto", "messages": [], "pad": "x" * 2048})
    assert too_large.status_code == 413  # by the API handler, before any view
    assert (
        await api.post(CHAT, content=b"hi", headers={"Content-Type": "text/plain"})
    ).status_code == 415
    assert (await api.get(MESSAGES)).status_code == 405
    assert (await api.post(CHAT, json={}, headers={"Authorization": ""})).status_code == 401
    after = parse(await metrics_text(api))[0]
    for door, app, code in (
        (CHAT, "suite", "unsupported_media_type"),
        (MESSAGES, "suite", "method_not_allowed"),
        (CHAT, "anonymous", "missing_api_key"),
        (CHAT, "suite", "body_too_large"),
    ):
        labels = {"door": door, "app": app, "code": code}
        assert value(after, REFUSED, **labels) - value(before, REFUSED, **labels) == 1, labels


async def test_a_refusal_shows_in_the_control_room_with_its_field_and_message(
    api, gateway, admin_user
):
    response = await api.post(CHAT, json=ROBOT_ROLE)
    assert response.status_code == 400
    error = response.json()["error"]
    [note] = await kept(gateway, lambda notes: len(notes) == 1)
    assert (note.door, note.app, note.status, note.code, note.field, note.message) == (
        CHAT,
        "suite",
        400,
        "invalid_field",
        error["param"],
        error["message"],
    )
    assert SECOND_ROLE.fullmatch(note.field)
    page = await control_room(gateway, admin_user)
    assert 'id="refusals-list"' in page and note.field in page and escape(note.message) in page
    assert f'href="{reverse("admin:control-refusals")}"' in page  # works without htmx
    partial = await control_room(gateway, admin_user, htmx=True)
    assert partial.lstrip().startswith('<section id="refusals"') and note.field in partial


async def test_a_message_that_quotes_what_the_client_sent_keeps_only_the_doors_words(api, gateway):
    tool = {"type": "function", "function": {"name": "read_my_diary", "parameters": {}}}
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "Hi."}],
        "tools": [tool, tool],
    }
    response = await api.post(CHAT, json=body)
    assert response.status_code == 400 and "read_my_diary" in response.text  # the client's own
    model = {
        "model": "a-model-named-after-my-secret-plan",
        "messages": [{"role": "user", "content": "Hi."}],
    }
    assert (await api.post(CHAT, json=model)).status_code == 404
    notes = await kept(gateway, lambda notes: len(notes) == 2)
    assert [note.code for note in notes] == ["model_not_found", "invalid_field"]
    for note in notes:
        assert "read_my_diary" not in note.message and "secret-plan" not in note.message
        assert "'…'" in note.message, note.message


async def test_a_flood_is_counted_whole_and_kept_a_few_at_a_time(
    api, gateway, clock, metrics_open, caplog
):
    caplog.set_level(logging.WARNING, logger="runtime.refusals")
    before = parse(await metrics_text(api))[0]
    flood = 3 * refusals.KEEP_BURST
    answers = await asyncio.gather(*(api.post(MESSAGES, json=ROBOT_ROLE) for _ in range(flood)))
    assert {answer.status_code for answer in answers} == {400}
    after = parse(await metrics_text(api))[0]
    assert value(after, REFUSED, door=MESSAGES) - value(before, REFUSED, door=MESSAGES) == flood
    await refusals.handed_over()
    assert len(await gateway.store.refusals_read()) == refusals.KEEP_BURST  # the clock stood still
    logged = [r for r in caplog.records if r.name == "runtime.refusals"]
    assert len(logged) == refusals.KEEP_BURST
    assert all(r.levelno == logging.WARNING for r in logged)
    line = 'refused door=/v1/messages app="suite" status=400 code=invalid_field field='
    assert logged[0].getMessage().startswith(line)
    assert SECOND_ROLE.fullmatch(logged[0].getMessage().removeprefix(line))
    clock.advance(1.0)  # room for KEEP_PER_S more
    await asyncio.gather(*(api.post(MESSAGES, json=ROBOT_ROLE) for _ in range(flood)))
    await refusals.handed_over()
    expected = refusals.KEEP_BURST + int(refusals.KEEP_PER_S)
    assert len(await gateway.store.refusals_read()) == expected


async def test_no_part_of_a_wrong_key_reaches_the_metrics_the_list_the_page_or_the_log(
    api, gateway, admin_user, metrics_open, caplog
):
    caplog.set_level(logging.DEBUG)
    key = "fgw_" + secrets.token_urlsafe(32)  # a real key's shape, no app's
    pieces = {key[i : i + 8] for i in range(4, len(key) - 7)}
    hello = {"model": "auto", "messages": [{"role": "user", "content": "Hi."}]}
    wrong = [
        await api.post(CHAT, json=hello, headers={"Authorization": f"Bearer {key}"}),
        await api.post(MESSAGES, json=ROBOT_ROLE, headers={"Authorization": "", "X-Api-Key": key}),
        # The suite's own key, and the wrong one where the body names a model or a field.
        await api.post(CHAT, json={**hello, "model": key}),
        await api.post(CHAT, json={**hello, key: "x"}),
        await api.post(COMPLETE, json={"prompt": "Hi.", "user": key, "temperature": 9}),
    ]
    assert [response.status_code for response in wrong] == [401, 401, 404, 400, 400]
    notes = await kept(gateway, lambda notes: len(notes) == len(wrong))
    assert {note.app for note in notes} == {"unknown key", "suite"}
    assert "other" in {note.field for note in notes}  # the field named like a key
    seen = {
        "metrics": await metrics_text(api),
        "list": "\n".join(repr(note) for note in notes),
        "page": await control_room(gateway, admin_user),
        "log": "\n".join(record.getMessage() for record in caplog.records),
    }
    for where, text in seen.items():
        assert not [piece for piece in pieces if piece in text], where


async def test_with_redis_down_a_refusal_is_answered_and_kept_in_local_state(
    providers_configured, closed_port, clock, admin_user
):
    from failover_site.asgi import application
    from gateway.engine.clock import Clock

    store = ResilientStore(RedisStore(f"redis://127.0.0.1:{closed_port}/0"))
    down = Gateway(store=store, clock=Clock(wall=clock.wall, mono=time.monotonic))
    transport = httpx.ASGITransport(app=handed(application, down))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        response = await client.post(MESSAGES, json=ROBOT_ROLE, headers={"X-Api-Key": "no"})
    assert response.status_code == 401
    [note] = await kept(down, lambda notes: len(notes) == 1)
    assert (note.code, note.app) == ("invalid_api_key", "unknown key")
    assert store.health()["ok"] is False
    assert "invalid_api_key" in await control_room(down, admin_user)
    await down.aclose()


# HELLO 3's answer (RESP3, as redis-py asks); every other greeting command gets +OK.
GREETING = {b"HELLO": b"%1\r\n$5\r\nproto\r\n:3\r\n"}


def commands(data: bytes) -> list[bytes]:
    """The name of each whole command in `data` (an array of bulk strings: `*<n>`, then
    `$<length>` and the text of each)."""
    lines, names, at = data.split(b"\r\n"), [], 0
    while at < len(lines):
        if lines[at].startswith(b"*") and at + 2 < len(lines):
            names.append(lines[at + 2].upper())
            at += 1 + 2 * int(lines[at][1:])
        else:
            at += 1
    return names


class StalledRedis:
    """A Redis that greets a connection (its CLIENT SETINFO and the like get +OK) and then
    answers nothing once the refusals' list is written to, until it hangs up: what it
    received, as it arrives."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.handlers: list[asyncio.Task[None]] = []
        self.server: asyncio.Server | None = None
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        stalled = False
        while data := await reader.read(65536):
            self.received.append(data)
            stalled = stalled or b"fo:refusals" in data
            if not stalled:
                writer.write(b"".join(GREETING.get(name, b"+OK\r\n") for name in commands(data)))

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def hang_up(self) -> None:
        """Gone: every connection closed, no new one taken."""
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.close()
        await asyncio.gather(*self.handlers, return_exceptions=True)


@pytest.fixture
async def stalled_redis() -> AsyncIterator[StalledRedis]:
    stalled = StalledRedis()
    await stalled.start()
    yield stalled
    await stalled.hang_up()


async def test_a_refusal_is_answered_while_a_stalled_redis_still_holds_its_note(
    stalled_redis, clock
):
    from failover_site.asgi import application
    from gateway.engine.clock import Clock

    # Patient enough that the note can only still be on its way when the answer comes.
    store = ResilientStore(RedisStore(stalled_redis.url, socket_timeout_s=120))
    stalled = Gateway(store=store, clock=Clock(wall=clock.wall, mono=time.monotonic))
    transport = httpx.ASGITransport(app=handed(application, stalled))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        response = await client.post(CHAT, content=b"hi", headers={"Content-Type": "text/plain"})
        assert response.status_code == 415
        assert refusals.waiting() == 1  # answered with its note still on the way
        deadline = time.monotonic() + 20
        while not any(b"fo:refusals" in data for data in stalled_redis.received):
            assert time.monotonic() < deadline, "the note never reached Redis"
            await asyncio.sleep(0.05)
        assert refusals.waiting() == 1  # and Redis has answered nothing
    await stalled_redis.hang_up()  # a Redis gone: the note goes to this process's memory
    await refusals.handed_over()
    assert [note.code for note in await store.refusals_read()] == ["unsupported_media_type"]
    await store.primary.aclose()


@pytest.mark.services
async def test_a_refusal_in_one_process_shows_in_the_control_room_of_another(
    api, gateway, admin_user
):
    other = Gateway(store=make_store())  # another serving process, on the same Redis
    assert (await api.post(MESSAGES, json=ROBOT_ROLE)).status_code == 400
    await kept(gateway, lambda notes: len(notes) == 1)
    page = await control_room(other, admin_user)
    assert SECOND_ROLE.search(page) and "/v1/messages" in page
    await other.aclose()
