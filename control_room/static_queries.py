"""Reads for the static-answer workbench: the answer list, the matcher as the router runs it,
and what the ledger says about the static tier."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from django.db.models import Count, F, Q, QuerySet
from django.db.models.expressions import OrderBy

from billing.models import CallRecord, Tier
from gateway.engine.faq import FaqMatch
from providers.models import StaticAnswer
from providers.selectors import faq_index_build, policy_get

# The list's sort orders by name; the question breaks ties so the order is stable.
SORTS: dict[str, tuple[str | OrderBy, ...]] = {
    "question": ("question",),
    "hits": ("-hit_count", "question"),
    "last_hit": (F("last_hit_at").desc(nulls_last=True), "question"),
}
DEFAULT_SORT = "question"


def static_answer_list(*, search: str = "", sort: str = DEFAULT_SORT) -> QuerySet[StaticAnswer]:
    """The answers whose question, phrasings or answer contain `search`, in the named order."""
    answers = StaticAnswer.objects.all()
    if search:
        answers = answers.filter(
            Q(question__icontains=search)
            | Q(alternative_phrasings__icontains=search)
            | Q(answer__icontains=search)
        )
    return answers.order_by(*SORTS.get(sort, SORTS[DEFAULT_SORT]))


@dataclass(frozen=True, slots=True)
class Trial:
    """What the static tier does with one question: the answer it sends (`match`), or the
    degradation message, with the best candidate that fell under the threshold (`best`)."""

    question: str
    threshold: int
    degradation_message: str
    match: FaqMatch | None
    best: FaqMatch | None


def static_trial(*, question: str) -> Trial:
    policy = policy_get()
    # Built from the database, not a serving process's snapshot: an edit shows at once.
    index = faq_index_build()
    threshold = policy.static_match_threshold
    match = index.match(question, threshold=threshold)
    # The same matcher with no cut-off names the candidate that came closest.
    best = None if match is not None else index.match(question, threshold=0)
    return Trial(
        question=question,
        threshold=threshold,
        degradation_message=policy.degradation_message,
        match=match,
        best=best if best is not None and best.score > 0 else None,
    )


@dataclass(frozen=True, slots=True)
class Coverage:
    """Requests that reached the static tier: answered by a static answer, or not."""

    answered: int
    unanswered: int

    @property
    def total(self) -> int:
        return self.answered + self.unanswered

    @property
    def share_pct(self) -> float | None:
        return round(100 * self.answered / self.total, 1) if self.total else None


def static_coverage(*, since: datetime) -> Coverage:
    counts = CallRecord.objects.filter(
        created_at__gte=since, tier__in=(Tier.STATIC, Tier.DEGRADED)
    ).aggregate(
        answered=Count("pk", filter=Q(tier=Tier.STATIC)),
        unanswered=Count("pk", filter=Q(tier=Tier.DEGRADED)),
    )
    return Coverage(answered=counts["answered"], unanswered=counts["unanswered"])


class Unmatched(TypedDict):
    prompt: str
    count: int


def unmatched_questions(*, since: datetime, limit: int = 10) -> list[Unmatched]:
    """The prompts that most often got the degradation message, most frequent first.
    Only prompts stored while the policy stored them count; the rest have only a hash."""
    return list(
        CallRecord.objects.filter(tier=Tier.DEGRADED, created_at__gte=since)
        .exclude(prompt="")
        .values("prompt")
        .annotate(count=Count("pk"))
        .order_by("-count", "prompt")[:limit]
    )
