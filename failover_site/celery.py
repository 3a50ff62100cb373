"""The Celery app: the production scheduler for the background jobs.

Workers start with `celery -A failover_site worker -B` (or a separate `beat`). The broker is
REDIS_URL (or CELERY_BROKER_URL). Without a broker the same job functions run inside the serving
process instead, so nothing here is needed in the embedded mode.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")

app = Celery("failover_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
