"""The snapshot holder sees a change committed by any process: in the embedded mode through the
database's record of changes (the version there is each process's own memory), with Redis
through the version every process shares."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections

from billing.seeding import demo_configuration_load
from gateway.state.contract import StateStore
from gateway.state.memory_store import MemoryStore
from providers.models import ChangeAction, ConfigChange, FailoverPolicy
from providers.selectors import config_change_high_water, policy_get
from providers.services.policy import kill_switch_set
from providers.services.seeding import static_answers_load_defaults
from runtime.gateway import Gateway
from runtime.snapshots import SnapshotHolder
from tests.serving import serving

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def this_process() -> AsyncIterator[Gateway]:
    """This process's gateway on the embedded mode's store: what a commit here announces to."""
    gateway = Gateway(store=MemoryStore())
    with serving(gateway):
        yield gateway
        await gateway.aclose()
    # The ORM ran in asgiref's worker thread: close its connection there.
    await sync_to_async(connections.close_all)()


async def _holder(store: StateStore) -> SnapshotHolder:
    holder = SnapshotHolder(store)
    await holder.refresh()
    return holder


def _changed_in_another_process(**values: object) -> None:
    """What another process's control-plane write leaves behind: the row changed and a change
    on record, and nothing in this process's memory (no signal here, no version bump)."""
    FailoverPolicy.objects.filter(pk=policy_get().pk).update(**values)
    ConfigChange.objects.create(
        actor_name="another process",
        action=ChangeAction.KILL_SWITCH,
        target_type="providers.failoverpolicy",
        target_repr="failover policy",
    )


def _rename_change_table(old: str, new: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {old} RENAME TO {new}")


async def test_a_change_recorded_by_another_process_is_served_after_the_next_poll(this_process):
    holder = await _holder(MemoryStore())
    before = await holder.current()
    await sync_to_async(_changed_in_another_process)(
        kill_switch="static_only", kill_switch_reason="drill"
    )
    await holder.poll_once()
    after = await holder.current()
    assert after.policy.kill_switch == "static_only"
    assert after.version > before.version  # the status endpoint's config_version moves
    await holder.aclose()


async def test_with_nothing_new_on_record_a_poll_rebuilds_nothing(this_process):
    holder = await _holder(MemoryStore())
    before = await holder.current()
    await holder.poll_once()
    await holder.poll_once()
    assert await holder.current() is before
    await holder.aclose()


async def test_a_change_made_in_this_process_is_rebuilt_once_not_twice(this_process):
    holder = this_process.snapshots
    before = await holder.refresh()
    await sync_to_async(kill_switch_set)(
        mode="static_only", provider=None, reason="drill", actor=None
    )
    await holder.poll_once()  # the version moved here: rebuilt
    rebuilt = await holder.current()
    assert rebuilt.policy.kill_switch == "static_only"
    assert rebuilt.version == before.version + 1
    await holder.poll_once()  # its own change on record is not taken for another's
    assert await holder.current() is rebuilt


async def test_an_unreadable_change_record_is_logged_once_and_the_poller_goes_on(
    this_process, caplog
):
    caplog.set_level(logging.WARNING, logger="runtime.snapshots")
    table = ConfigChange._meta.db_table
    holder = await _holder(MemoryStore())
    holder.POLL_S = 0.05
    before = await holder.current()  # starts the poller
    await sync_to_async(_rename_change_table)(table, f"{table}_away")
    try:
        await asyncio.sleep(0.3)  # several polls against the missing table
        assert await holder.current() is before
        unreadable = [r for r in caplog.records if "could not be read" in r.getMessage()]
        assert len(unreadable) == 1
    finally:
        await sync_to_async(_rename_change_table)(f"{table}_away", table)
    await sync_to_async(_changed_in_another_process)(
        kill_switch="static_only", kill_switch_reason="drill"
    )
    deadline = time.monotonic() + 2
    while (await holder.current()).policy.kill_switch != "static_only":
        assert time.monotonic() < deadline, "the poller stopped after the database error"
        await asyncio.sleep(0.02)
    assert "can be read again" in caplog.text
    await holder.aclose()


async def test_every_seeding_path_leaves_a_change_on_record(this_process):
    def seed() -> list[tuple[int, int]]:
        stands = [config_change_high_water()]
        static_answers_load_defaults()
        stands.append(config_change_high_water())
        demo_configuration_load()
        stands.append(config_change_high_water())
        return stands

    empty, answers_loaded, demo_loaded = await sync_to_async(seed)()
    assert empty < answers_loaded < demo_loaded


@pytest.mark.services
async def test_with_redis_the_poller_reads_the_shared_version_not_the_database():
    from gateway.state.redis_store import RedisStore
    from gateway.state.resilient_store import ResilientStore

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    store = ResilientStore(RedisStore(settings.REDIS_URL))
    holder = await _holder(store)
    try:
        before = await holder.current()
        await sync_to_async(_changed_in_another_process)(
            kill_switch="static_only", kill_switch_reason="drill"
        )
        await holder.poll_once()
        assert await holder.current() is before  # no SQL per poll: the version tells
        await sync_to_async(RedisStore(settings.REDIS_URL).bump_config_version)()
        await holder.poll_once()
        assert (await holder.current()).policy.kill_switch == "static_only"
    finally:
        await holder.aclose()
        await store.aclose()
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
        await sync_to_async(connections.close_all)()
