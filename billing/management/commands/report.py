"""`manage.py report spend|cloud-share|coverage|incidents [--by day|month] [--since DATE]
[--until DATE] [--group provider|client] [--format csv|json|text]`: the control room's reports
on the command line, in the same figures and the same CSV (`billing.reports`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from billing.report_formats import FORMATS, report_render
from billing.report_options import PERIODS, REPORTS, ReportError, report_query
from billing.reports import report_build


class Command(BaseCommand):
    help = (
        "Spend, cloud share, static coverage or incidents over a range of days in the policy's "
        "time zone (default: the last 30 days), from the roll-ups and the live ledger."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("report", choices=REPORTS)
        parser.add_argument("--by", choices=PERIODS, help="Periods of a day (default) or a month.")
        parser.add_argument("--since", help="The first day, YYYY-MM-DD (default: 29 days ago).")
        parser.add_argument("--until", help="The last day, YYYY-MM-DD (default: today).")
        parser.add_argument(
            "--group",
            choices=("provider", "client"),
            help="spend: per provider (default) or per client; cloud-share and coverage: per "
            "client (default: not grouped).",
        )
        parser.add_argument("--format", choices=FORMATS, default="text", dest="fmt")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            query = report_query(
                report=options["report"],
                now=timezone.now(),
                since=options["since"],
                until=options["until"],
                by=options["by"],
                group=options["group"],
            )
        except ReportError as error:
            raise CommandError(f"--{error.option}: {error}") from None
        self.stdout.write(report_render(report_build(query), options["fmt"]), ending="")
