"""Serve the fake alert receiver in the foreground, for alert drills.

    python manage.py fakereceiver --port 8099 --mode ok

Point a Telegram channel's api_base_url at http://127.0.0.1:8099, a Slack channel's webhook
variable at http://127.0.0.1:8099/slack/drill, a webhook channel at http://127.0.0.1:8099/hook/drill;
every request it receives is printed. Needs no database.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from devtools.fake_receiver import MODES, FakeReceiver


class Command(BaseCommand):
    help = "Serve a fake Telegram / Slack / webhook receiver that prints what it receives."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8099, help="0 picks a free one.")
        parser.add_argument("--mode", choices=MODES, default="ok")
        parser.add_argument("--telegram-token", help="Answer 401 to any other bot token.")
        parser.add_argument("--hook-secret", help="Answer 401 to an unsigned or mis-signed hook.")

    def handle(self, *args: Any, **options: Any) -> None:
        receiver = FakeReceiver(
            host=options["host"],
            port=options["port"],
            telegram_token=options["telegram_token"],
            hook_secret=options["hook_secret"],
        )
        receiver.set_mode(options["mode"])
        with receiver:
            self.stdout.write(f"Fake alert receiver on {receiver.url} (Ctrl-C stops it)")
            seen = 0
            try:
                while True:
                    messages = receiver.messages
                    for message in messages[seen:]:
                        self.stdout.write(
                            f"{message.method} {message.path} -> {message.status}: "
                            f"{message.text or message.body.decode(errors='replace')}"
                        )
                    seen = len(messages)
                    time.sleep(0.2)
            except KeyboardInterrupt:
                pass
