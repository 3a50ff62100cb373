"""The ROI calculator: all-cloud against self-hosted against hybrid cost a month, the saving,
the break-even volume and the payback of the hardware (the formula is billing/roi.py's).

One GET form, prefilled from the ledger's volumes and the first cloud fallback's prices; any
field can be changed, and the query string carries them, so a figure can be linked to. With
htmx the form and its result swap in place; without JavaScript the same GET reloads the page.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from billing.roi import (
    LABELS,
    MONTH_DAYS,
    RoiInputs,
    RoiResult,
    ledger_reading,
    million_tokens,
    money,
    number,
    roi_calculate,
    roi_problems,
)
from control_room import charts
from providers.form_input import FormInput

LEDGER_PERMISSION = "billing.view_callrecord"
REGISTRY_PERMISSION = "providers.view_provider"
TEMPLATE = "control/roi.html"
MAX_DAYS = 3650
BAR_COLOR = "#0072b2"


def urls(site: AdminSite) -> list[URLPattern]:
    @require_GET
    def roi_page(request: HttpRequest) -> TemplateResponse:
        return roi_view(request, site=site)

    return [path("control/roi/", site.admin_view(roi_page), name="control-roi")]


class RoiForm(forms.Form):
    """The formula's inputs as typed; their ranges are billing/roi.py's `roi_problems`, so the
    page and `manage.py roi` refuse the same values with the same words."""

    monthly_tokens = forms.IntegerField()
    input_share_pct = forms.DecimalField(help_text="Prompt tokens' share of all tokens.")
    input_price_per_1m = forms.DecimalField()
    output_price_per_1m = forms.DecimalField()
    exchange_rate = forms.DecimalField(
        help_text="Multiplies the two prices: 1 when they are already in the policy's currency."
    )
    infrastructure_per_month = forms.DecimalField(
        help_text="Self-hosting's fixed cost a month: machines, power, upkeep."
    )
    cloud_share_pct = forms.DecimalField(
        help_text="The share of the tokens a hybrid setup still sends to the cloud."
    )
    hardware_cost = forms.DecimalField(help_text="A one-off cost for the payback; 0 for none.")

    def __init__(self, *args: Any, currency: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field.label = LABELS[name]
            field.widget.attrs.update({"step": "1" if name == "monthly_tokens" else "any"})
        for name in ("input_price_per_1m", "output_price_per_1m"):
            self.fields[name].help_text = "In the currency the provider quotes it in."
        for name in ("infrastructure_per_month", "hardware_cost"):
            self.fields[name].label = f"{LABELS[name]} ({currency})"
        self.inputs: RoiInputs | None = None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        parsed = {name: cleaned[name] for name in LABELS if cleaned.get(name) is not None}
        # A field that didn't parse stands in as zero (in range), so the others' ranges are
        # still checked and every mistake is shown at once.
        inputs = RoiInputs(**{name: parsed.get(name, 0) for name in LABELS})
        for name, message in roi_problems(inputs).items():
            if name in parsed:
                self.add_error(name, message)
        if not self.errors:
            self.inputs = inputs
        return cleaned


def roi_view(request: HttpRequest, *, site: AdminSite) -> TemplateResponse:
    user = request.user
    may_read_ledger = user.has_perm(LEDGER_PERMISSION)
    may_read_prices = user.has_perm(REGISTRY_PERMISSION)
    if not (may_read_ledger or may_read_prices):
        raise PermissionDenied(
            "The ROI calculator reads the call ledger and the providers' prices: it takes the "
            "view permission of either."
        )
    given = FormInput(request.GET)
    days, days_error = _days(given)
    reading = ledger_reading(days, volumes=may_read_ledger, prices=may_read_prices)
    # The ledger's values, with whatever the query string overrides.
    data = {name: _as_field(getattr(reading.inputs, name)) for name in LABELS}
    data.update({name: given.text(name, default=data[name], max_length=100) for name in LABELS})
    form = RoiForm(data, currency=reading.currency)
    for name, messages in given.errors.items():
        if name in form.fields:
            form.add_error(name, messages)
    result = None
    if form.is_valid() and form.inputs is not None:
        result = roi_calculate(form.inputs, currency=reading.currency)
    context = {
        **site.each_context(request),
        "title": "ROI calculator",
        "form": form,
        "days": days,
        "days_error": days_error,
        "max_days": MAX_DAYS,
        "notes": reading.notes,
        "currency": reading.currency,
        "result": result,
        "figures": figures(result) if result else [],
        "chart": cost_chart(result) if result else None,
    }
    template = f"{TEMPLATE}#roi" if getattr(request, "htmx", False) else TEMPLATE
    return TemplateResponse(request, template, context)


def _days(given: FormInput) -> tuple[int, str]:
    """The ledger window asked for, or the default with the reason it wasn't taken."""
    days = given.whole_number("days", low=1, high=MAX_DAYS, default=MONTH_DAYS)
    if "days" not in given.errors:
        return days or MONTH_DAYS, ""
    return MONTH_DAYS, (
        f"The ledger window must be a whole number of days from 1 to {MAX_DAYS}: "
        f"read over {MONTH_DAYS} instead."
    )


def _as_field(value: int | Decimal) -> str:
    # Typed as an operator would: no exponent, no trailing zeros, no thousands separator.
    if isinstance(value, int):
        return str(value)
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def figures(result: RoiResult) -> list[tuple[str, str, str]]:
    """(id, label, value) for each figure the page shows."""
    c = result.currency
    saving = f"{money(result.saving)} {c}"
    if result.saving < 0:
        saving += " — negative: hybrid costs more than all-cloud"
    break_even = result.break_even_tokens
    payback = result.payback_months
    return [
        ("all-cloud", "All-cloud", f"{money(result.all_cloud)} {c}"),
        ("self-hosted", "All self-hosted", f"{money(result.self_hosted)} {c}"),
        ("hybrid", "Hybrid", f"{money(result.hybrid)} {c}"),
        ("saving", "Monthly saving (all-cloud − hybrid)", saving),
        (
            "break-even",
            "Break-even volume",
            "none: the cloud prices are zero"
            if break_even is None
            else f"{million_tokens(break_even)} tokens a month",
        ),
        (
            "payback",
            "Payback of the hardware",
            "none: the saving is not positive"
            if payback is None
            else f"{number(payback, 1)} months",
        ),
    ]


def cost_chart(result: RoiResult) -> SafeString:
    costs = [result.all_cloud, result.self_hosted, result.hybrid]
    return charts.bar_chart(
        title=f"Cost a month, in {result.currency}",
        labels=["All-cloud", "All self-hosted", "Hybrid"],
        values=[float(cost) for cost in costs],
        color=BAR_COLOR,
        unit=result.currency,
        empty_note="All three cost nothing at these inputs.",
    )
