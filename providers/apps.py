from __future__ import annotations

import logging

from django.apps import AppConfig
from django.conf import settings

from gateway.engine.secret_destinations import bare_destinations_advice

logger = logging.getLogger(__name__)


class ProvidersConfig(AppConfig):
    name = "providers"
    verbose_name = "Providers and routing"

    def ready(self) -> None:
        # A secret's destination written as a host alone still works (read as https on 443);
        # each process says once, per variable, how to write it with its scheme and port.
        for line in bare_destinations_advice(settings.SECRET_DESTINATIONS):
            logger.warning(line)
