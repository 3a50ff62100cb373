"""First-run set-up: the policy row and the 50 static answers, and with --demo the demo
configuration, its model aliases, an admin user and a client app (its key printed once). Safe
to run on every start: each part happens once."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.seeding import demo_configuration_load
from providers.models import ClientApp
from providers.selectors import policy_get
from providers.services.client_apps import client_app_create
from providers.services.seeding import demo_aliases_load, static_answers_load_defaults

# The demo's own frontend: any provider by name, high priority, the status; the usual local
# development servers' origins.
DEMO_CLIENT: dict[str, Any] = {
    "name": "demo",
    "description": "Made by the demo set-up.",
    "allowed_models": "*",
    "allow_high_priority": True,
    "can_read_status": True,
    "allowed_origins": "http://localhost:3000\nhttp://localhost:5173\nhttp://127.0.0.1:8000",
}


def _not_embedded() -> str:
    """Why this is no embedded mode, in one line; "" when it is one. Embedded is DEBUG on (the
    demo's Ollama on 127.0.0.1 is allowed, a generated password printed is no production secret)
    and the shared state in this process (no REDIS_URL: one process, not a cluster). The
    database doesn't matter: a developer's own PostgreSQL is still embedded."""
    if not settings.DEBUG:
        where = "this is a production deployment (DEBUG=false)"
    elif settings.STATE_BACKEND != "memory":
        where = "this deployment shares its state through REDIS_URL"
    else:
        return ""
    return (
        f"bootstrap --demo is for the embedded mode only and {where}: run bootstrap without "
        "--demo, create the admin user with createsuperuser and add the providers in the admin."
    )


class Command(BaseCommand):
    help = "Load the failover policy, the shipped static answers and (with --demo) the demo set-up."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--demo",
            action="store_true",
            help="Embedded mode only (DEBUG on, no REDIS_URL): load the demo providers, "
            "budgets and model aliases (fast, smart), and create an admin user with a "
            "generated password (printed once) if there is no superuser.",
        )

    def handle(self, *args: Any, demo: bool, **options: Any) -> None:
        if demo:
            refusal = _not_embedded()
            if refusal:
                raise CommandError(refusal)  # before anything is written
        policy_get()
        added = static_answers_load_defaults()
        if added:
            self.stdout.write(f"Loaded {added} static answers.")
        if not demo:
            return
        if demo_configuration_load():
            self.stdout.write("Loaded the demo configuration (providers and budgets).")
        aliases = demo_aliases_load()
        if aliases:
            self.stdout.write(f"Loaded the demo's model aliases ({', '.join(aliases)}).")
        self._ensure_admin_user()
        self._ensure_demo_client()

    def _ensure_demo_client(self) -> None:
        """The demo's client app, so the README's examples run as they are; its key is shown
        this once (`manage.py clientapp create` makes another)."""
        if ClientApp.objects.exists():
            return
        app, key = client_app_create(actor=None, reason="demo configuration", **DEMO_CLIENT)
        banner = "=" * 64
        self.stdout.write(
            self.style.WARNING(
                f"{banner}\n"
                f"Created the client app '{app.name}'. Its API key is shown this once:\n"
                f"    {key}\n"
                "Use it as 'Authorization: Bearer <key>' (export FAILOVER_API_KEY=<key> for "
                "the README's examples).\n"
                f"{banner}"
            )
        )

    def _ensure_admin_user(self) -> None:
        user_model = get_user_model()
        if user_model.objects.filter(is_superuser=True).exists():
            return
        username = "admin"
        if user_model.objects.filter(username=username).exists():
            username = f"admin-{secrets.token_hex(3)}"
        password = secrets.token_urlsafe(12)
        user_model.objects.create_superuser(username=username, email="", password=password)
        banner = "=" * 64
        self.stdout.write(
            self.style.WARNING(
                f"{banner}\n"
                "Created the admin user. The password is shown this once:\n"
                f"    username: {username}\n    password: {password}\n"
                "Change it in the admin (top right: 'Change password').\n"
                f"{banner}"
            )
        )
