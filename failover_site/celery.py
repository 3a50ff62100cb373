"""Where `celery -A failover_site` finds the app: the runtime's (`runtime/celery_app.py`)."""

from __future__ import annotations

from runtime.celery_app import app

__all__ = ("app",)
