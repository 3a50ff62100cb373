"""What self-hosting saves: all-cloud against all-self-hosted against hybrid cost per month, the
break-even volume and the payback of a one-off hardware cost.

The formula is the hybrid-cloud design document's, applied as written (its prose rounds to
figures its own formula doesn't give, so every result carries the formula with the numbers put
in, for an operator to check):

    all-cloud    = input tokens × input price + output tokens × output price
    self-hosted  = infrastructure (a fixed cost a month)
    hybrid       = infrastructure + the cloud share of the tokens at cloud prices
    break-even   = infrastructure / blended price per token  (blended = all-cloud / tokens)
    saving       = all-cloud − hybrid;  payback = hardware / saving, when the saving is positive

`roi_calculate` is pure Decimal arithmetic; `ledger_reading` fills the inputs from the call
ledger's volumes and the first cloud fallback's prices.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext

from django.db.models import Count, Sum
from django.utils import timezone

from billing.models import CallRecord
from billing.selectors import cloud_q
from providers.models import Provider
from providers.selectors import policy_get

MILLION = Decimal(1_000_000)
HUNDRED = Decimal(100)
MONTH_DAYS = 30
# With no traffic to measure it on: the design document's example, chat prompts being longer
# than their answers.
DEFAULT_INPUT_SHARE = Decimal(70)

# Each input's name as an operator reads it: the form's labels and the messages use them.
LABELS = {
    "monthly_tokens": "Tokens a month",
    "input_share_pct": "Input share (%)",
    "input_price_per_1m": "Input price per 1M tokens",
    "output_price_per_1m": "Output price per 1M tokens",
    "exchange_rate": "Exchange rate",
    "infrastructure_per_month": "Infrastructure a month",
    "cloud_share_pct": "Cloud share (%)",
    "hardware_cost": "One-off hardware cost",
}
PERCENT_INPUTS = ("input_share_pct", "cloud_share_pct")
# Far past any real bill or volume, and short of what the chart's floats and Decimal's exponent
# can hold: a typo of a few extra digits is refused, not drawn.
LARGEST = Decimal(10) ** 15
# Below this a value other than zero is a slip (1e-999 typed for 1): refused, so no figure
# needs more digits than Decimal carries.
SMALLEST = Decimal(10) ** -12


@dataclass(frozen=True)
class RoiInputs:
    """One month's traffic and what it costs where. Prices are per 1M tokens in the quoting
    currency; `exchange_rate` turns them into the policy's currency (1 when they already are)."""

    monthly_tokens: int
    input_share_pct: Decimal
    input_price_per_1m: Decimal
    output_price_per_1m: Decimal
    infrastructure_per_month: Decimal
    cloud_share_pct: Decimal
    exchange_rate: Decimal = Decimal(1)
    hardware_cost: Decimal = Decimal(0)


class RoiInputError(ValueError):
    """Inputs the formula can't take; `problems` maps each input's name to what is wrong."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__(" ".join(problems.values()))
        self.problems = problems


def roi_problems(inputs: RoiInputs) -> dict[str, str]:
    """What is wrong with each input, by name; empty when the formula can take them all."""
    problems: dict[str, str] = {}
    for item in fields(inputs):
        name, value = item.name, getattr(inputs, item.name)
        label = LABELS[name]
        if isinstance(value, Decimal) and not value.is_finite():
            problems[name] = f"{label} must be a number."
        elif name in PERCENT_INPUTS and not 0 <= value <= 100:
            problems[name] = f"{label} must be between 0 and 100."
        elif name == "exchange_rate" and value <= 0:
            problems[name] = (
                "The exchange rate must be above zero (1 when the prices are already in the "
                "policy's currency)."
            )
        elif value < 0:
            problems[name] = f"{label} cannot be negative."
        elif value > LARGEST:
            problems[name] = f"{label} is too large: at most {LARGEST:,f}."
        elif 0 < value < SMALLEST:
            problems[name] = f"{label} is too small: zero, or at least {SMALLEST:f}."
    return problems


@dataclass(frozen=True)
class RoiResult:
    """Every figure of the formula, exact (round only to show), in the policy's currency, a
    month; None where a figure doesn't exist (no break-even without a cloud price, no payback
    without a positive saving)."""

    inputs: RoiInputs
    currency: str
    input_tokens: Decimal
    output_tokens: Decimal
    input_price_per_1m: Decimal  # in the policy's currency
    output_price_per_1m: Decimal
    all_cloud: Decimal
    self_hosted: Decimal
    hybrid: Decimal
    cloud_part: Decimal  # the cloud share's cost inside hybrid
    blended_per_1m: Decimal
    break_even_tokens: Decimal | None
    saving: Decimal
    payback_months: Decimal | None
    verdict: str
    formula: tuple[str, ...] = field(default=())


def roi_calculate(inputs: RoiInputs, *, currency: str) -> RoiResult:
    """The design document's formula on `inputs`; raises RoiInputError on inputs it can't take."""
    problems = roi_problems(inputs)
    if problems:
        raise RoiInputError(problems)
    tokens = Decimal(inputs.monthly_tokens)
    input_tokens = tokens * inputs.input_share_pct / HUNDRED
    output_tokens = tokens - input_tokens
    input_price = inputs.input_price_per_1m * inputs.exchange_rate
    output_price = inputs.output_price_per_1m * inputs.exchange_rate
    all_cloud = (input_tokens * input_price + output_tokens * output_price) / MILLION
    infrastructure = inputs.infrastructure_per_month
    cloud_part = all_cloud * inputs.cloud_share_pct / HUNDRED
    hybrid = infrastructure + cloud_part
    # all-cloud / tokens, written as the mix of the two prices so that it exists at 0 tokens too.
    share = inputs.input_share_pct / HUNDRED
    blended_per_1m = share * input_price + (1 - share) * output_price
    break_even = infrastructure / blended_per_1m * MILLION if blended_per_1m else None
    saving = all_cloud - hybrid
    payback = inputs.hardware_cost / saving if saving > 0 else None
    result = RoiResult(
        inputs=inputs,
        currency=currency,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        input_price_per_1m=input_price,
        output_price_per_1m=output_price,
        all_cloud=all_cloud,
        self_hosted=infrastructure,
        hybrid=hybrid,
        cloud_part=cloud_part,
        blended_per_1m=blended_per_1m,
        break_even_tokens=break_even,
        saving=saving,
        payback_months=payback,
        verdict="",
    )
    return replace(result, verdict=_verdict(result), formula=_formula(result))


# Showing the figures ---------------------------------------------------------------------------


def money(amount: Decimal) -> str:
    """Cents once there are units to speak of; below that, the fractions cloud calls cost."""
    size = abs(amount)
    places = 2 if size >= 1 or not size else 4 if size >= Decimal("0.01") else 6
    return f"{_rounded(amount, places):,f}".replace("-", "−")


def number(value: Decimal, places: int = 6) -> str:
    """A rate or a price as typed: no trailing zeros, at most `places` decimals."""
    text = f"{_rounded(value, places):,f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def tokens(value: Decimal | int) -> str:
    return f"{_rounded(Decimal(value), 0):,f}"


def million_tokens(value: Decimal) -> str:
    return f"{_rounded(value / MILLION, 1):,f} M"


def _rounded(value: Decimal, places: int) -> Decimal:
    # Half up, as money is rounded on an invoice (Decimal's own default is half even). The
    # inputs' bounds keep every figure within 10^60, and so within these digits.
    with localcontext() as context:
        context.prec = 100
        return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _verdict(r: RoiResult) -> str:
    c = r.currency
    if r.saving > 0:
        payback = (
            "nothing to pay back"
            if r.payback_months == 0
            else f"the hardware pays for itself in {number(r.payback_months or Decimal(0), 1)} "
            "months"
        )
        return f"Hybrid saves {money(r.saving)} {c} a month against all-cloud; {payback}."
    if r.saving == 0:
        return "Hybrid costs the same as all-cloud: nothing is saved, nothing pays back."
    return (
        f"Hybrid costs {money(-r.saving)} {c} a month more than all-cloud, a negative saving: at "
        f"{million_tokens(Decimal(r.inputs.monthly_tokens))} tokens a month the cloud is cheaper "
        "than the infrastructure, so the hardware never pays back."
    )


def _formula(r: RoiResult) -> tuple[str, ...]:
    i, c = r.inputs, r.currency
    in_pct, out_pct = number(i.input_share_pct, 2), number(HUNDRED - i.input_share_pct, 2)
    lines = [
        f"tokens a month = {tokens(i.monthly_tokens)} = {tokens(r.input_tokens)} input "
        f"({in_pct} %) + {tokens(r.output_tokens)} output ({out_pct} %)",
    ]
    if i.exchange_rate != 1:
        lines.append(
            f"prices in {c} per 1M tokens: input {number(i.input_price_per_1m)} × "
            f"{number(i.exchange_rate)} = {number(r.input_price_per_1m)}, output "
            f"{number(i.output_price_per_1m)} × {number(i.exchange_rate)} = "
            f"{number(r.output_price_per_1m)}"
        )
    input_cost = r.input_tokens * r.input_price_per_1m / MILLION
    output_cost = r.output_tokens * r.output_price_per_1m / MILLION
    infra = money(r.self_hosted)
    lines += [
        f"all-cloud = {tokens(r.input_tokens)} × {number(r.input_price_per_1m)} / 1M + "
        f"{tokens(r.output_tokens)} × {number(r.output_price_per_1m)} / 1M = "
        f"{money(input_cost)} + {money(output_cost)} = {money(r.all_cloud)} {c}",
        f"self-hosted = infrastructure = {infra} {c}",
        f"hybrid = infrastructure + the cloud share of the tokens at cloud prices = {infra} + "
        f"{number(i.cloud_share_pct, 2)} % × {money(r.all_cloud)} = {infra} + "
        f"{money(r.cloud_part)} = {money(r.hybrid)} {c}",
        f"blended price = all-cloud / tokens = {in_pct} % × {number(r.input_price_per_1m)} + "
        f"{out_pct} % × {number(r.output_price_per_1m)} = {number(r.blended_per_1m)} {c} "
        "per 1M tokens",
    ]
    if r.break_even_tokens is None:
        lines.append("break-even = infrastructure / blended price: none, the cloud price is zero")
    else:
        lines.append(
            f"break-even = infrastructure / blended price = {infra} / "
            f"{number(r.blended_per_1m)} per 1M = {million_tokens(r.break_even_tokens)} tokens "
            "a month"
        )
    lines.append(
        f"monthly saving = all-cloud − hybrid = {money(r.all_cloud)} − {money(r.hybrid)} = "
        f"{money(r.saving)} {c}"
    )
    hardware = money(i.hardware_cost)
    if r.payback_months is None:
        lines.append(
            f"payback = hardware / saving = {hardware} / {money(r.saving)}: none, the saving "
            "is not positive"
        )
    else:
        lines.append(
            f"payback = hardware / saving = {hardware} / {money(r.saving)} = "
            f"{number(r.payback_months, 1)} months"
        )
    return tuple(lines)


# From the ledger ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerReading:
    """The inputs as the ledger and the registry have them, and where each came from."""

    inputs: RoiInputs
    currency: str
    days: int
    requests: int
    tokens: int  # in the window, before scaling to a month
    cloud_tokens: int
    price_provider: str  # "" when there is no enabled cloud provider
    price_model: str
    notes: tuple[str, ...]


def ledger_reading(
    days: int = MONTH_DAYS,
    *,
    volumes: bool = True,
    prices: bool = True,
    now: datetime | None = None,
) -> LedgerReading:
    """The ledger's last `days` of provider-answered tokens, scaled to a 30-day month, their
    input share and cloud share (tokens answered by providers not marked self-hosted, as the
    budgets count them), and the prices of the enabled cloud provider with the lowest priority
    number (the first cloud fallback). `volumes=False` or `prices=False` leaves those out (zero)
    for someone who may not read the ledger or the registry. Infrastructure and hardware are
    the operator's to type in: they start at zero."""
    if days < 1:
        raise RoiInputError({"days": "The ledger window must be at least one day."})
    policy = policy_get()
    notes: list[str] = []
    window = days
    if days > policy.ledger_retention_days:
        # Older records are deleted: a longer window would only divide the same tokens by more.
        window = policy.ledger_retention_days
        notes.append(f"The ledger keeps {window} days: read over {window}, not {days}.")
    requests = total = inputs_total = cloud = 0
    if volumes:
        since = (now or timezone.now()) - timedelta(days=window)
        totals = (
            CallRecord.objects.filter(created_at__gte=since)
            .exclude(final_provider="")
            .aggregate(
                requests=Count("id"),
                all_in=Sum("tokens_in"),
                all_out=Sum("tokens_out"),
                cloud_in=Sum("tokens_in", filter=cloud_q()),
                cloud_out=Sum("tokens_out", filter=cloud_q()),
            )
        )
        requests = totals["requests"]
        inputs_total = totals["all_in"] or 0
        total = inputs_total + (totals["all_out"] or 0)
        cloud = (totals["cloud_in"] or 0) + (totals["cloud_out"] or 0)
        notes.append(
            f"Ledger, last {window} days: {requests:,} requests answered by providers, "
            f"{total:,} tokens, {tokens(Decimal(cloud))} of them by cloud providers."
        )
    else:
        notes.append("Volumes not read: the call ledger takes its view permission.")
    if total:
        input_share = _percent(Decimal(inputs_total) * HUNDRED / total)
        cloud_share = _percent(Decimal(cloud) * HUNDRED / total)
    else:
        input_share = DEFAULT_INPUT_SHARE
        cloud_share = _percent(Decimal(str(policy.cloud_share_target_pct)))
        notes.append(
            f"No tokens to go by: the input share is the design document's {DEFAULT_INPUT_SHARE} "
            "% and the cloud share the policy's target."
        )
    provider = None
    if prices:
        provider = (
            Provider.objects.filter(enabled=True, is_local=False)
            .order_by("priority", "name")
            .first()
        )
        notes.append(
            f"Prices of {provider.name} ({provider.model}), the first enabled cloud provider, "
            f"in {policy.currency}."
            if provider is not None
            else "No enabled cloud provider: type the cloud prices in."
        )
    else:
        notes.append("Prices not read: the provider registry takes its view permission.")
    inputs = RoiInputs(
        monthly_tokens=round(Decimal(total) * MONTH_DAYS / window),
        input_share_pct=input_share,
        input_price_per_1m=provider.price_input_per_1m if provider else Decimal(0),
        output_price_per_1m=provider.price_output_per_1m if provider else Decimal(0),
        infrastructure_per_month=Decimal(0),
        cloud_share_pct=cloud_share,
    )
    return LedgerReading(
        inputs=inputs,
        currency=policy.currency,
        days=window,
        requests=requests,
        tokens=total,
        cloud_tokens=cloud,
        price_provider=provider.name if provider else "",
        price_model=provider.model if provider else "",
        notes=tuple(notes),
    )


def _percent(value: Decimal) -> Decimal:
    # Hundredths of a percent: finer than the ledger can tell, short enough to read in a form.
    return value.quantize(Decimal("0.01"))
