"""The drill's report as text: the figures, one line each, the alerts, the ledger, and a chart of
who served each second; the last line says PASSED or what failed."""

from __future__ import annotations

from collections.abc import Sequence

from devtools.drill.report import Report, late_line

CHART_WIDTH = 40
TIER_MARKS = {"primary": "P", "secondary": "S", "cache": "C", "static": "T", "degraded": "D"}


def _fmt(value: float | None, unit: str = " s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def chart(report: Report) -> list[str]:
    """One line per second: a bar of who served (P primary, S secondary, C cache, T static,
    D degraded, x client error), scaled to the busiest second, and the counts."""
    top = max((sum(second.values()) for second in report.per_second), default=0)
    lines = []
    for at, second in enumerate(report.per_second):
        total = sum(second.values())
        bar = ""
        for tier, count in sorted(second.items(), key=lambda item: _tier_order(item[0])):
            bar += TIER_MARKS.get(tier, "x") * round(CHART_WIDTH * count / top) if top else ""
        mark = ""
        if report.fault_at is not None and int(report.fault_at) == at:
            mark = "  <- fault"
        if report.clear_at is not None and int(report.clear_at) == at:
            mark += "  <- cleared"
        counts = " ".join(
            f"{tier} {n}" for tier, n in sorted(second.items(), key=lambda i: _tier_order(i[0]))
        )
        lines.append(f"  {at:>3} s |{bar:<{CHART_WIDTH}}| {total:>4}  {counts}{mark}")
    return lines


def _tier_order(tier: str) -> int:
    order = [*TIER_MARKS, "error"]
    return order.index(tier) if tier in order else len(order)


def text(report: Report, *, scenario: str, description: str, notes: Sequence[str] = ()) -> str:
    r = report
    errors = ", ".join(f"{kind} {n}" for kind, n in r.errors_by_kind.items()) or "none"
    sent = f"{r.requests}" + (f" ({r.skipped} not sent: in-flight bound)" if r.skipped else "")
    slowest = "-"
    if r.slowest:
        slowest = f"{r.slowest['latency_s']:.2f} s (sent at {r.slowest['sent_at']} s, "
        slowest += f"{r.slowest['tier'] or r.slowest['status']})"
    full = f"{r.full_timeout_waits} (the faulted provider's timeout or longer)"
    recovery = f"{_fmt(r.recovery_s)} (breaker closed {_fmt(r.breaker_closed_after_clear_s)} after)"
    rows = [
        ("requests sent", sent),
        ("client errors", f"{r.client_errors} ({errors})"),
        ("served by tier", ", ".join(f"{t} {n}" for t, n in r.tiers.items()) or "-"),
        ("fault / cleared at", f"{_fmt(r.fault_at)} / {_fmt(r.clear_at)}"),
        ("fault -> breaker open", _fmt(r.fault_to_open_s)),
        ("after open + 1 s", late_line(r)),
        ("fault -> 99 % next tier", _fmt(r.fault_to_next_tier_s)),
        ("waited more than 2 s", f"{r.waits_over_2s} ({r.answered_within_2s_pct} % within 2 s)"),
        ("waited a full timeout", "-" if r.full_timeout_waits is None else full),
        ("p95 / slowest", f"{_fmt(r.p95_s)} / {slowest}"),
        ("recovery after clear", recovery),
        ("first real answer", f"{_fmt(r.real_answer_after_clear_s)} after the clear"),
        ("faulted tier served", f"{_fmt(r.faulted_first_answer_s)} after the start"),
        ("alerts raised", str(len(r.alerts))),
    ]
    lines = [f"Drill: {scenario}", f"  {description}", *(f"  note: {n}" for n in notes), ""]
    lines += [f"{label:<24} {value}" for label, value in rows]
    lines += [
        f"    {a.get('at', '')} s  {a.get('severity', '')}  {a.get('title', '')}" for a in r.alerts
    ]
    lines.append(f"{'ledger':<24} {_ledger_line(r)}")
    if r.ledger:
        for title, counts in (("why", r.ledger["reasons"]), ("attempts", r.ledger["attempts"])):
            lines.append(
                f"  {title:<22} " + (", ".join(f"{k} {n}" for k, n in counts.items()) or "-")
            )
    lines += ["", "who served each second:", *chart(r), ""]
    lines.append("PASSED" if not r.violations else "FAILED: " + "; ".join(r.violations))
    return "\n".join(lines)


def _ledger_line(r: Report) -> str:
    if r.ledger is None:
        return "not read"
    line = f"{r.ledger['matched']} rows matched of {r.requests} sent"
    if r.ledger["client_rows"] is not None:
        line += f", {r.ledger['client_rows']} rows of the drill's client"
    return line + f" (waited {r.ledger['waited_s']:.1f} s): {'ok' if r.ledger_ok else 'MISMATCH'}"
