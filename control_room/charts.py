"""Server-drawn SVG charts for the control room: plain data in, markup out.

No Django models, no queries, no clock: each function takes labels and numbers and returns one
`<svg>` element as a safe string, ready to inline in a template. Every piece of text goes through
`format_html`, so a provider called `<b>` stays text. The SVG is well-formed XML (it parses with
`xml.etree`), carries `role="img"`, an `aria-label`, a `<title>` and a `<desc>`; the page puts a
table of the same numbers beside it for screen readers and for copying.

Text and axes are drawn in `currentColor`, so the charts follow the admin's light and dark themes;
only the series colours are fixed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

NO_REQUESTS = "No requests in this period."

# Okabe–Ito, colour-blind safe, minus its yellow (lost on white) and black (lost on the dark
# theme), plus two of Tol's muted colours to reach eight lines.
PALETTE = (
    "#0072b2",
    "#d55e00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#e69f00",
    "#882255",
    "#999933",
)

WIDTH = 720
HEIGHT = 260
LEFT, RIGHT, TOP, BOTTOM = 60, 16, 34, 40
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = HEIGHT - TOP - BOTTOM
BAR_FILL = 0.7  # share of each slot the bar covers; the rest is the gap between bars


@dataclass(frozen=True)
class Scale:
    """The y axis: 0 to `top`, with a tick every `step`."""

    top: float
    step: float
    decimals: int

    def y(self, value: float) -> float:
        return TOP + PLOT_H - self.height(value)

    def height(self, value: float) -> float:
        return PLOT_H * max(value, 0.0) / self.top

    def ticks(self) -> list[float]:
        count = round(self.top / self.step)
        return [self.step * i for i in range(count + 1)]

    def label(self, value: float) -> str:
        return f"{value:,.{self.decimals}f}"


def nice_scale(largest: float, *, integer: bool = False, ticks: int = 4) -> Scale:
    """A y axis from 0 that holds `largest`, with about `ticks` round steps (1, 2 or 5 × 10ⁿ)."""
    if not largest > 0:
        return Scale(top=1.0, step=1.0 if integer else 0.25, decimals=0 if integer else 2)
    raw = largest / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if raw <= m * magnitude)
    if integer:
        step = max(step, 1.0)
    top = step * math.ceil(largest / step - 1e-9)
    decimals = 0 if step >= 1 else -math.floor(math.log10(step))
    return Scale(top=top, step=step, decimals=decimals)


def percentile(values: Iterable[float], pct: float) -> float | None:
    """The nearest-rank percentile (the smallest value with `pct` % of values at or below it);
    None for no values. Nearest rank reports a latency some call really had."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _n(value: float) -> str:
    """A coordinate: two decimals are finer than any screen."""
    return f"{value:.2f}"


def _slot(count: int) -> float:
    return PLOT_W / max(count, 1)


def _center(index: int, count: int) -> float:
    return LEFT + (index + 0.5) * _slot(count)


def _join(parts: Iterable[SafeString]) -> SafeString:
    # Every part came out of format_html, so the concatenation is safe too.
    return mark_safe("".join(parts))


def _colors(names: Sequence[str], colors: Mapping[str, str] | None) -> dict[str, str]:
    colors = colors or {}
    return {name: colors.get(name, PALETTE[i % len(PALETTE)]) for i, name in enumerate(names)}


def _frame(
    *, title: str, description: str, body: Iterable[SafeString], css_class: str
) -> SafeString:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="chart {}" viewBox="0 0 {} {}" '
        'role="img" aria-label="{}" font-size="11" font-family="inherit">'
        "<title>{}</title><desc>{}</desc>{}</svg>",
        css_class,
        WIDTH,
        HEIGHT,
        f"{title}. {description}",
        title,
        description,
        _join(body),
    )


def _axes(scale: Scale, labels: Sequence[str], label_every: int, unit: str) -> list[SafeString]:
    parts = []
    for tick in scale.ticks():
        y = _n(scale.y(tick))
        parts.append(
            format_html(
                '<line class="chart-grid" x1="{}" x2="{}" y1="{}" y2="{}" '
                'stroke="currentColor" stroke-opacity="0.15"/>'
                '<text class="chart-tick" x="{}" y="{}" text-anchor="end" '
                'dominant-baseline="middle" fill="currentColor">{}</text>',
                LEFT,
                LEFT + PLOT_W,
                y,
                y,
                LEFT - 6,
                y,
                scale.label(tick),
            )
        )
    if unit:
        parts.append(
            format_html(
                '<text class="chart-unit" x="{}" y="{}" fill="currentColor" '
                'fill-opacity="0.7">{}</text>',
                4,
                TOP - 8,
                unit,
            )
        )
    baseline = _n(TOP + PLOT_H)
    parts.append(
        format_html(
            '<line class="chart-axis" x1="{}" x2="{}" y1="{}" y2="{}" stroke="currentColor" '
            'stroke-opacity="0.6"/>',
            LEFT,
            LEFT + PLOT_W,
            baseline,
            baseline,
        )
    )
    step = max(label_every, 1)
    for index, label in enumerate(labels):
        if index % step:
            continue
        parts.append(
            format_html(
                '<text class="chart-label" x="{}" y="{}" text-anchor="middle" '
                'fill="currentColor">{}</text>',
                _n(_center(index, len(labels))),
                _n(TOP + PLOT_H + 16),
                label,
            )
        )
    return parts


def _legend(colors: Mapping[str, str]) -> list[SafeString]:
    parts = []
    x = float(LEFT)
    for name, color in colors.items():
        parts.append(
            format_html(
                '<g class="chart-legend-item"><rect x="{}" y="{}" width="10" height="10" '
                'fill="{}"/><text x="{}" y="{}" fill="currentColor">{}</text></g>',
                _n(x),
                8,
                color,
                _n(x + 14),
                17,
                name,
            )
        )
        # Text width is the browser's business; 6.5 px a character at 11 px is close enough
        # to keep legend entries apart.
        x += 14 + 6.5 * len(name) + 18
    return parts


def _empty_note(note: str) -> SafeString:
    return format_html(
        '<text class="chart-empty" x="{}" y="{}" text-anchor="middle" fill="currentColor" '
        'fill-opacity="0.7" font-size="14">{}</text>',
        _n(LEFT + PLOT_W / 2),
        _n(TOP + PLOT_H / 2),
        note,
    )


def _has_data(values: Iterable[float | None]) -> bool:
    return any(value for value in values if value is not None)


def stacked_bar_chart(
    *,
    title: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    colors: Mapping[str, str] | None = None,
    unit: str = "",
    label_every: int = 1,
    empty_note: str = NO_REQUESTS,
) -> SafeString:
    """One bar per label, each split into the series' values stacked in the mapping's order
    (the first at the bottom). All series are as long as `labels`."""
    palette = _colors(list(series), colors)
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    scale = nice_scale(max(totals, default=0), integer=True)
    body = [*_legend(palette), *_axes(scale, labels, label_every, unit)]
    width = _slot(len(labels)) * BAR_FILL
    for index, label in enumerate(labels):
        x = _n(_center(index, len(labels)) - width / 2)
        below = 0.0
        for name, values in series.items():
            value = values[index]
            if not value:
                continue
            body.append(
                format_html(
                    '<rect class="chart-bar" data-series="{}" x="{}" y="{}" width="{}" '
                    'height="{}" fill="{}"><title>{} · {}: {}</title></rect>',
                    name,
                    x,
                    _n(scale.y(below + value)),
                    _n(width),
                    _n(scale.height(value)),
                    palette[name],
                    label,
                    name,
                    _number(value),
                )
            )
            below += value
    total = sum(totals)
    if total:
        busiest = max(range(len(totals)), key=totals.__getitem__)
        description = (
            f"{_number(total)} in all; the most, {_number(totals[busiest])}, at {labels[busiest]}."
        )
    else:
        description = empty_note
        body.append(_empty_note(empty_note))
    return _frame(title=title, description=description, body=body, css_class="chart-stacked")


def bar_chart(
    *,
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    color: str = PALETTE[0],
    unit: str = "",
    label_every: int = 1,
    total_label: str = "",
    empty_note: str = NO_REQUESTS,
) -> SafeString:
    """One bar per label. `total_label`, when given, is printed in the top right corner (e.g.
    "total 12.34")."""
    scale = nice_scale(max(values, default=0))
    body = _axes(scale, labels, label_every, unit)
    width = _slot(len(labels)) * BAR_FILL
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        if not value:
            continue
        body.append(
            format_html(
                '<rect class="chart-bar" x="{}" y="{}" width="{}" height="{}" fill="{}">'
                "<title>{}: {}</title></rect>",
                _n(_center(index, len(labels)) - width / 2),
                _n(scale.y(value)),
                _n(width),
                _n(scale.height(value)),
                color,
                label,
                _number(value),
            )
        )
    if total_label:
        body.append(
            format_html(
                '<text class="chart-total" x="{}" y="{}" text-anchor="end" '
                'fill="currentColor" font-weight="bold">{}</text>',
                LEFT + PLOT_W,
                17,
                total_label,
            )
        )
    if _has_data(values):
        description = total_label or f"{_number(sum(values))} in all."
    else:
        description = empty_note
        body.append(_empty_note(empty_note))
    return _frame(title=title, description=description, body=body, css_class="chart-bars")


def line_chart(
    *,
    title: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    colors: Mapping[str, str] | None = None,
    unit: str = "",
    label_every: int = 1,
    empty_note: str = NO_REQUESTS,
) -> SafeString:
    """One line per series over the labels; None is a gap (no value in that slot), and a value
    with gaps on both sides is drawn as a lone dot."""
    palette = _colors(list(series), colors)
    largest = max((v for values in series.values() for v in values if v is not None), default=0)
    scale = nice_scale(largest)
    body = [*_legend(palette), *_axes(scale, labels, label_every, unit)]
    for name, values in series.items():
        path: list[str] = []
        dots = []
        pen_down = False
        for index, value in enumerate(values):
            if value is None:
                pen_down = False
                continue
            x, y = _n(_center(index, len(labels))), _n(scale.y(value))
            path.append(f"{'L' if pen_down else 'M'}{x} {y}")
            pen_down = True
            dots.append(
                format_html(
                    '<circle class="chart-point" cx="{}" cy="{}" r="3" fill="{}">'
                    "<title>{} · {}: {}{}</title></circle>",
                    x,
                    y,
                    palette[name],
                    name,
                    labels[index],
                    _number(value),
                    f" {unit}" if unit else "",
                )
            )
        if path:
            body.append(
                format_html(
                    '<path class="chart-line" data-series="{}" d="{}" fill="none" stroke="{}" '
                    'stroke-width="2" stroke-linejoin="round"/>',
                    name,
                    " ".join(path),
                    palette[name],
                )
            )
        body.extend(dots)
    if any(_has_data(values) for values in series.values()):
        description = "One line for each of: " + ", ".join(series) + "."
    else:
        description = empty_note
        body.append(_empty_note(empty_note))
    return _frame(title=title, description=description, body=body, css_class="chart-lines")


def _number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")
