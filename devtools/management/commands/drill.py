"""`manage.py drill SCENARIO`: a scripted incident under a steady load, and its report.

    python manage.py drill blackhole                       # the drill's own gateway
    python manage.py drill refused --rate 50 --duration 20 --json
    python manage.py drill blackhole --url https://staging:8000 --key "$KEY" \\
        --fake-url http://staging-fake-primary:11434 --fake-url http://staging-fake-secondary:11435

Exits 0 when the run met the scenario's expectations, 1 when it did not (client errors, a
ledger that does not reconcile, a breaker that did not open or opened when it must not, traffic
that moved on too late), 2 when the drill could not be run (bad options included; argparse's own
usage errors exit 2 as well), 143 when it was stopped by SIGTERM. The logic is in
devtools/drill/.
"""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.drill.embedded import DrillSetupError
from devtools.drill.runner import DrillError, Options, execute
from devtools.drill.scenarios import SCENARIOS
from providers.models import FailoverPolicy

# "The drill could not be run": CommandError's own default (1) means "expectations broken" here.
CANNOT_RUN = 2


class Command(BaseCommand):
    help = "Run a failover drill: a fault switched on a fake provider under load, then a report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scenario", choices=sorted(SCENARIOS))
        parser.add_argument(
            "--url",
            action="append",
            default=[],
            help="A running gateway's base URL (repeat for several processes); default: the "
            "drill starts its own (embedded).",
        )
        parser.add_argument(
            "--fake-url",
            action="append",
            default=[],
            help="With --url: the primary's fake provider, then the secondary's.",
        )
        parser.add_argument(
            "--key", default="", help="With --url: a client key (default: $FAILOVER_API_KEY)."
        )
        parser.add_argument("--rate", type=float, help="Requests per second (scenario's default).")
        parser.add_argument("--duration", type=float, help="Seconds of load.")
        parser.add_argument("--fault-at", type=float, help="Seconds into the run.")
        parser.add_argument("--fault-for", type=float, help="Seconds the fault lasts.")
        parser.add_argument(
            "--concurrency", type=int, default=512, help="Most requests in flight (512)."
        )
        parser.add_argument(
            "--processes", type=int, default=1, help="Embedded: serving processes (>1: Redis)."
        )
        parser.add_argument("--redis", action="store_true", help="Embedded: on a private Redis.")
        parser.add_argument(
            "--policy",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="Embedded: a policy field for the run (repeat), e.g. cooldown_s=60.",
        )
        parser.add_argument(
            "--ledger-wait", type=float, default=15.0, help="Most seconds to wait for the ledger."
        )
        parser.add_argument("--keep", action="store_true", help="Embedded: keep the temp dir.")
        parser.add_argument("--json", action="store_true", help="The report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in ("rate", "duration", "fault_for"):
            if options[name] is not None and options[name] <= 0:
                raise CommandError(
                    f"--{name.replace('_', '-')} must be above 0", returncode=CANNOT_RUN
                )
        if options["fault_at"] is not None and options["fault_at"] < 0:
            raise CommandError("--fault-at must be 0 or more", returncode=CANNOT_RUN)
        if options["concurrency"] < 1 or options["processes"] < 1:
            raise CommandError(
                "--concurrency and --processes must be at least 1", returncode=CANNOT_RUN
            )
        run = Options(
            scenario=options["scenario"],
            urls=[url.rstrip("/") for url in options["url"]],
            fake_urls=[url.rstrip("/") for url in options["fake_url"]],
            key=options["key"] or os.environ.get("FAILOVER_API_KEY", ""),
            rate=options["rate"],
            duration_s=options["duration"],
            fault_at_s=options["fault_at"],
            fault_for_s=options["fault_for"],
            concurrency=options["concurrency"],
            processes=options["processes"],
            redis=options["redis"],
            policy=dict(_policy_value(item) for item in options["policy"]),
            ledger_wait_s=options["ledger_wait"],
            keep=options["keep"],
        )
        if run.urls and not run.key:
            raise CommandError(
                "--url needs a client key: --key or $FAILOVER_API_KEY", returncode=CANNOT_RUN
            )
        quiet = options["json"]

        def say(line: str) -> None:
            if not quiet:
                self.stderr.write(line)

        try:
            outcome = execute(run, say=say)
        except (DrillError, DrillSetupError) as exc:
            raise CommandError(str(exc), returncode=CANNOT_RUN) from None
        self.stdout.write(json.dumps(outcome.to_dict(), indent=2) if quiet else outcome.text)
        if outcome.report.violations:
            raise SystemExit(1)


def _policy_value(item: str) -> tuple[str, Any]:
    name, sep, raw = item.partition("=")
    if not sep or not name:
        raise CommandError(f"--policy {item!r}: FIELD=VALUE expected", returncode=CANNOT_RUN)
    try:
        FailoverPolicy._meta.get_field(name)
    except FieldDoesNotExist:
        raise CommandError(f"--policy {item!r}: the policy has no field {name!r}",
                           returncode=CANNOT_RUN) from None  # fmt: skip
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return name, value
