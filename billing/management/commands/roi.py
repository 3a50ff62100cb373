"""`manage.py roi [--tokens N] [--input-share PCT] ... [--format text|json]`: all-cloud against
self-hosted against hybrid cost a month, from the ledger's volumes and the first cloud
fallback's prices, any of them overridden by an option (billing/roi.py has the formula)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.roi import (
    LABELS,
    MONTH_DAYS,
    RoiInputError,
    RoiResult,
    ledger_reading,
    million_tokens,
    money,
    number,
    roi_calculate,
)

# Each input's option, in the order they are shown.
OPTIONS = {
    "monthly_tokens": "--tokens",
    "input_share_pct": "--input-share",
    "input_price_per_1m": "--input-price",
    "output_price_per_1m": "--output-price",
    "exchange_rate": "--rate",
    "infrastructure_per_month": "--infrastructure",
    "cloud_share_pct": "--cloud-share",
    "hardware_cost": "--hardware",
}
HELP = {
    "monthly_tokens": "Tokens a month, input and output together.",
    "input_share_pct": "The input (prompt) share of the tokens, in %%.",
    "input_price_per_1m": "Cloud price per 1M input tokens, in the quoting currency.",
    "output_price_per_1m": "Cloud price per 1M output tokens, in the quoting currency.",
    "exchange_rate": "Quoting currency → the policy's currency (default 1).",
    "infrastructure_per_month": "Self-hosting's fixed cost a month, in the policy's currency.",
    "cloud_share_pct": "The share of the tokens a hybrid setup still sends to the cloud, in %%.",
    "hardware_cost": "A one-off hardware cost to pay back, in the policy's currency.",
}


def _whole(text: str) -> int:
    try:
        return int(text.replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None


def _decimal(text: str) -> Decimal:
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value.is_finite():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    return value


class Command(BaseCommand):
    help = (
        "All-cloud vs self-hosted vs hybrid cost a month, the saving, break-even and payback. "
        "From the call ledger and the provider registry unless an option gives the figure."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=MONTH_DAYS,
            help=f"Read the ledger's last N days, scaled to a month (default {MONTH_DAYS}).",
        )
        for name, option in OPTIONS.items():
            parser.add_argument(
                option,
                dest=name,
                type=_whole if name == "monthly_tokens" else _decimal,
                help=HELP[name],
            )
        parser.add_argument(
            "--format",
            choices=("text", "json"),
            default="text",
            help="json: every figure as a decimal string, null where there is none.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        given = {name: options[name] for name in OPTIONS if options[name] is not None}
        try:
            reading = ledger_reading(options["days"])
            inputs = replace(reading.inputs, **given)
            result = roi_calculate(inputs, currency=reading.currency)
        except RoiInputError as exc:
            raise CommandError(
                " ".join(
                    f"{OPTIONS.get(name, '--' + name)}: {message}"
                    for name, message in exc.problems.items()
                )
            ) from None
        if options["format"] == "json":
            self.stdout.write(
                json.dumps(_as_json(result, reading.notes, given), indent=2, ensure_ascii=False)
            )
        else:
            self.stdout.write(_as_text(result, reading.notes, given))


def _as_json(result: RoiResult, notes: tuple[str, ...], given: dict[str, Any]) -> dict[str, Any]:
    figures = {
        key: None if value is None else str(value)
        for key, value in asdict(result).items()
        if key not in ("inputs", "currency", "verdict", "formula")
    }
    return {
        "currency": result.currency,
        "inputs": {key: str(value) for key, value in asdict(result.inputs).items()},
        "given": sorted(given),
        **figures,
        "verdict": result.verdict,
        "formula": list(result.formula),
        "ledger": list(notes),
    }


def _as_text(result: RoiResult, notes: tuple[str, ...], given: dict[str, Any]) -> str:
    c = result.currency
    lines = ["Inputs (given, or from the ledger and the registry):"]
    for name in OPTIONS:
        value = getattr(result.inputs, name)
        shown = f"{value:,}" if name == "monthly_tokens" else number(value)
        lines.append(f"  {LABELS[name]:<28} {shown:>16}  {'given' if name in given else ''}")
    lines += [f"  {note}" for note in notes]
    break_even = result.break_even_tokens
    payback = result.payback_months
    lines += [
        "",
        f"Cost a month, in {c}:",
        f"  all-cloud    {money(result.all_cloud):>14}",
        f"  self-hosted  {money(result.self_hosted):>14}",
        f"  hybrid       {money(result.hybrid):>14}",
        f"  saving       {money(result.saving):>14}",
        "  break-even   "
        + ("none" if break_even is None else f"{million_tokens(break_even)} tokens a month"),
        "  payback      " + ("none" if payback is None else f"{number(payback, 1)} months"),
        "",
        result.verdict,
        "",
        "Formula:",
        *(f"  {line}" for line in result.formula),
    ]
    return "\n".join(lines)
