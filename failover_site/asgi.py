"""The ASGI application every serving process runs (`uvicorn failover_site.asgi:application`)."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "failover_site.settings")

application = get_asgi_application()

if settings.SERVE_STATIC:
    # Django's own static handler (the one runserver uses): fine for the admin's assets in the
    # embedded mode; production puts a reverse proxy in front of STATIC_ROOT instead.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    application = ASGIStaticFilesHandler(application)
