"""The composition root. `celery -A failover_site` finds the Celery app in `failover_site.celery`;
a serving process imports Celery only when it hands a job to it (`runtime/scheduler.py`)."""
