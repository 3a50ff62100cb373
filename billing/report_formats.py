"""A report as CSV, JSON or text: what `manage.py report` prints and the control room's
"Download CSV" serves, from the same functions."""

from __future__ import annotations

import csv
import io
import json
from datetime import date
from decimal import Decimal
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from billing.report_options import Report

FORMATS = ("csv", "json", "text")


def cell(value: Any) -> str:
    """One value as CSV and text show it: money to the ledger's precision, no "None"."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def report_csv(report: Report) -> str:
    """A header row of the columns, then one row per line of the report."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(report.columns)
    for row in report.rows:
        writer.writerow([cell(row[column]) for column in report.columns])
    return out.getvalue()


def report_json(report: Report) -> str:
    """A list of objects, one per line of the report (money as decimal strings, to keep every
    digit; a share with nothing to share is null)."""
    rows = [{column: row[column] for column in report.columns} for row in report.rows]
    return json.dumps(rows, cls=DjangoJSONEncoder, indent=2) + "\n"


def report_text(report: Report) -> str:
    """The title, the definition, an aligned table and the headline, for a terminal."""
    query = report.query
    lines = [
        f"{report.title}, {query.since} to {query.until} ({query.policy.time_zone})",
        report.definition,
        "",
    ]
    table = [list(report.columns)] + [
        [cell(row[column]) for column in report.columns] for row in report.rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(report.columns))]
    for line in table:
        lines.append("  ".join(value.ljust(w) for value, w in zip(line, widths, strict=True)))
    if not report.rows:
        lines.append("(nothing in this range)")
    lines += ["", report.headline]
    return "\n".join(line.rstrip() for line in lines) + "\n"


RENDERERS = {"csv": report_csv, "json": report_json, "text": report_text}


def report_render(report: Report, fmt: str) -> str:
    return RENDERERS[fmt](report)
