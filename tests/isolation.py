"""Each run of the suite on its own test database and Redis db, so two checkouts on one machine,
and the xdist workers of one run, never share either.

- PostgreSQL: pytest-django's test database (`test_<NAME>`) gets the checkout's tag and the
  worker's id: `test_test_<tag>_gw0`. The tag is a digest of the checkout's path.
- Redis: the URL names the server; the db index is claimed. Each worker takes the first free
  index of 1–15 with `SET NX` on a claim key in db 0 (`failover-test:claim:<index>`, holding the
  checkout, the worker and its pid), keeps it alive while it runs, and gives it back at the end;
  a claim whose process died lapses within a minute and a half.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

CHECKOUT = Path(__file__).resolve().parent.parent
CHECKOUT_TAG = hashlib.sha256(str(CHECKOUT).encode()).hexdigest()[:8]
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
CLAIM_PREFIX = "failover-test:claim:"
CLAIMABLE_DBS = range(1, 16)
CLAIM_TTL_S = 90
_RENEW_EVERY_S = 20


def test_database_name(name: str) -> str:
    return f"test_{name}_{CHECKOUT_TAG}_{WORKER}"


def redis_url_with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


class RedisClaim:
    """This process's Redis db: claimed at the start of the run, given back at its end."""

    def __init__(self, server_url: str) -> None:
        import redis

        self._registry = redis.Redis.from_url(redis_url_with_db(server_url, 0))
        self._owner = f"{CHECKOUT}|{WORKER}|{os.getpid()}"
        self._stop = threading.Event()
        self.db = self._claim()
        self.url = redis_url_with_db(server_url, self.db)
        threading.Thread(target=self._renew, name="redis-claim", daemon=True).start()

    def _claim(self) -> int:
        for db in CLAIMABLE_DBS:
            if self._registry.set(CLAIM_PREFIX + str(db), self._owner, nx=True, ex=CLAIM_TTL_S):
                return db
        held = {db: self._registry.get(CLAIM_PREFIX + str(db)) for db in CLAIMABLE_DBS}
        raise RuntimeError(f"every Redis db of 1-15 is claimed by another test run: {held}")

    def _renew(self) -> None:
        key = CLAIM_PREFIX + str(self.db)
        while not self._stop.wait(_RENEW_EVERY_S):
            self._registry.set(key, self._owner, ex=CLAIM_TTL_S)

    def release(self) -> None:
        self._stop.set()
        key = CLAIM_PREFIX + str(self.db)
        if self._registry.get(key) == self._owner.encode():
            self._registry.delete(key)
        self._registry.close()


def point_at_claimed_redis(settings: object, claim: RedisClaim) -> None:
    """Every setting and environment variable that names the test Redis, moved to the claimed
    db before anything has connected (the children a test starts inherit the environment)."""
    from django.core.cache import caches

    from failover_site.celery import app

    settings.REDIS_URL = claim.url  # type: ignore[attr-defined]
    settings.CELERY_BROKER_URL = claim.url  # type: ignore[attr-defined]
    settings.CACHES["default"]["LOCATION"] = claim.url  # type: ignore[attr-defined]
    # The cache handler reads CACHES once, on first use.
    caches.__dict__.pop("settings", None)
    app.conf.broker_url = claim.url
    os.environ["REDIS_URL"] = claim.url
    os.environ.pop("CELERY_BROKER_URL", None)
