"""`manage.py clientapp create NAME [options] | list | revoke NAME`: client apps and their keys
from the command line, so a deployment can script them. `create` prints the key once."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway.engine.clients import StandIn
from providers.models import ClientApp
from providers.models.client_app import lines_of
from providers.services.client_apps import client_app_create, client_app_revoke


class Command(BaseCommand):
    help = "Create, list and revoke client apps (the keys frontends call the API with)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Make an app and print its key once.")
        create.add_argument("name")
        create.add_argument("--description", default="")
        create.add_argument("--rpm", type=int, help="Requests per minute (0: no limit).")
        create.add_argument("--tpm", type=int, help="Tokens per minute (0: no limit).")
        create.add_argument(
            "--origin", action="append", default=[], help="An allowed browser origin (repeat)."
        )
        create.add_argument(
            "--model",
            action="append",
            default=[],
            help="A provider it may ask for by name (repeat; * for any).",
        )
        create.add_argument("--no-cloud", action="store_true", help="Never reach cloud providers.")
        create.add_argument(
            "--high-priority", action="store_true", help='May send priority "high".'
        )
        create.add_argument("--status", action="store_true", help="May read /api/v1/status.")
        create.add_argument(
            "--stand-ins",
            type=_stand_ins,
            default=frozenset(StandIn),
            metavar="LIST",
            help="What may stand in for an answer when no provider gives one: a comma-separated "
            "list of cached, static, degraded; all (the default, for a widget) or none (for an "
            "agent's backend: a 503 with Retry-After instead).",
        )
        create.add_argument(
            "--shared-cache",
            action="store_true",
            help="Share the answer cache with the other apps that share it (a public FAQ "
            "widget); without it, the answers cached for the app are served to it alone.",
        )
        create.add_argument(
            "--json", action="store_true", help="Print the app and its key as JSON."
        )
        listing = actions.add_parser("list", help="The apps, with their key prefixes.")
        listing.add_argument("--json", action="store_true")
        revoke = actions.add_parser("revoke", help="Revoke an app's key for good.")
        revoke.add_argument("name")
        revoke.add_argument("--reason", default="")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(self, *, name: str, **options: Any) -> None:
        values: dict[str, Any] = {
            "name": name,
            "description": options["description"],
            "allowed_origins": "\n".join(options["origin"]),
            "allowed_models": "\n".join(options["model"]),
            "allow_cloud": not options["no_cloud"],
            "allow_high_priority": options["high_priority"],
            "can_read_status": options["status"],
            "accept_cached": StandIn.CACHED in options["stand_ins"],
            "accept_static": StandIn.STATIC in options["stand_ins"],
            "accept_degraded": StandIn.DEGRADED in options["stand_ins"],
            "shared_answer_cache": options["shared_cache"],
        }
        if options["rpm"] is not None:
            values["requests_per_minute"] = options["rpm"]
        if options["tpm"] is not None:
            values["tokens_per_minute"] = options["tpm"]
        try:
            app, key = client_app_create(actor=None, **values)
        except ValidationError as exc:
            raise CommandError("; ".join(_messages(exc))) from None
        if options["json"]:
            self.stdout.write(json.dumps({**_row(app), "key": key}))
            return
        self.stdout.write(f"Created client app {app.name}. Its key, shown this once:")
        self.stdout.write(f"    {key}")

    def _list(self, **options: Any) -> None:
        rows = [_row(app) for app in ClientApp.objects.all()]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        for row in rows:
            state = "revoked" if row["revoked"] else "enabled" if row["enabled"] else "disabled"
            self.stdout.write(
                f"{row['name']:<24} {row['key_prefix']}…  {state:<8} "
                f"{row['requests_per_minute']} rpm  {row['tokens_per_minute']} tpm"
            )

    def _revoke(self, *, name: str, reason: str, **options: Any) -> None:
        app = ClientApp.objects.filter(name=name).first()
        if app is None:
            raise CommandError(f"No client app is named {name!r}.")
        if client_app_revoke(app=app, actor=None, reason=reason):
            self.stdout.write(f"Revoked the key of {name} ({app.key_prefix}…).")
        else:
            self.stdout.write(f"The key of {name} was already revoked.")


def _row(app: ClientApp) -> dict[str, Any]:
    return {
        "name": app.name,
        "key_prefix": app.key_prefix,
        "enabled": app.enabled,
        "revoked": app.revoked_at is not None,
        "requests_per_minute": app.requests_per_minute,
        "tokens_per_minute": app.tokens_per_minute,
        "allow_cloud": app.allow_cloud,
        "allowed_origins": lines_of(app.allowed_origins),
        "allowed_models": lines_of(app.allowed_models),
        "allow_high_priority": app.allow_high_priority,
        "can_read_status": app.can_read_status,
        "stand_ins": sorted(app.stand_ins),
        "shared_answer_cache": app.shared_answer_cache,
    }


def _stand_ins(value: str) -> frozenset[StandIn]:
    """`--stand-ins`: all, none, or stand-ins by name, comma-separated."""
    words = {word.strip().lower() for word in value.split(",") if word.strip()}
    if words == {"all"}:
        return frozenset(StandIn)
    if words == {"none"}:
        return frozenset()
    unknown = sorted(words - {stand_in.value for stand_in in StandIn})
    if unknown or not words:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'nothing'}: write all, none, or some of "
            "cached, static, degraded"
        )
    return frozenset(StandIn(word) for word in words)


def _messages(exc: ValidationError) -> list[str]:
    if hasattr(exc, "error_dict"):
        return [f"{field}: {' '.join(m)}" for field, m in exc.message_dict.items()]
    return list(exc.messages)
