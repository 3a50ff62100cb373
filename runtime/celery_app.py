"""The Celery app: the production scheduler for the background jobs.

Workers start with `celery -A failover_site worker -B` (or a separate `celery -A failover_site
beat`, exactly one per cluster): `failover_site.celery` hands Celery this app. The broker is
REDIS_URL (or CELERY_BROKER_URL). Without a broker the same job functions run inside the
serving process instead (`runtime/scheduler.py`).

Every periodic task expires when its next run is due: a worker that was stopped for an hour
comes back to one run of each, not to a backlog of hundreds.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")

app = Celery("failover_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

BEAT_SCHEDULE = {
    # The sentinel's own interval is the policy's (30 s by default): each tick takes a shared
    # lock for that long, so with several workers one check per interval runs.
    "sentinel": {"task": "failover.sentinel", "schedule": 5.0, "options": {"expires": 5.0}},
    "keepalive": {"task": "failover.keepalive", "schedule": 30.0, "options": {"expires": 30.0}},
    "watchdog": {"task": "failover.watchdog", "schedule": 30.0, "options": {"expires": 30.0}},
    "housekeeping": {
        "task": "failover.housekeeping",
        "schedule": 600.0,
        "options": {"expires": 600.0},
    },
}
app.conf.beat_schedule = BEAT_SCHEDULE
