"""Reads of the usage ledger (issue 28): the drift of each card between Nexum's count and the provider's, and
usage totals per project, goal or task and per card.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, QuerySet, Sum

from context_app.compilation.models import ContextUsage
from nexum.core.catalog.usage import DriftSummary, summarize_drift
from nexum.core.errors import NotFound
from nexum.core.ids import uuid_or_none
from tasks_app.models import Task


@dataclass(frozen=True)
class CardDrift:
    """One card's drift in one project over its latest reports (``NEXUM_USAGE_DRIFT_WINDOW``), and whether it
    is past ``threshold`` (``NEXUM_USAGE_DRIFT_THRESHOLD``)."""

    project_id: str
    card_word: str
    summary: DriftSummary
    threshold: float

    @property
    def drifting(self) -> bool:
        return self.summary.over(self.threshold)


def drift_per_card(*, project_id: str | None = None) -> list[CardDrift]:
    """Every card with usage reported, in one project or (``None``) every project, by project and word: the
    selector a drift gauge reads. Each card reads only its latest reports, by index."""
    window = settings.NEXUM_USAGE_DRIFT_WINDOW
    threshold = settings.NEXUM_USAGE_DRIFT_THRESHOLD
    cards = ContextUsage.objects.all()
    if project_id is not None:
        cards = cards.filter(project_id=project_id)
    pairs = cards.order_by("project_id", "card_word").values_list("project_id", "card_word").distinct()
    drifts = []
    for project, word in pairs:
        samples = list(
            ContextUsage.objects.filter(project_id=project, card_word=word)
            .order_by("-position")
            .values_list("nexum_tokens", "prompt_tokens")[:window]
        )
        summary = summarize_drift(samples)
        if summary is not None:
            drifts.append(CardDrift(str(project), word, summary, threshold))
    return drifts


def drift_by_card(*, project_id: str) -> dict[str, CardDrift]:
    """The project's cards with usage, by card word."""
    return {drift.card_word: drift for drift in drift_per_card(project_id=project_id)}


@dataclass(frozen=True)
class UsageTotals:
    """Usage summed over reports: Nexum's and the provider's prompt tokens, completion tokens and cost (the
    sum of the reports that gave one; ``None`` when none did)."""

    reports: int
    nexum_tokens: int
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal | None
    costed_reports: int


@dataclass(frozen=True)
class CardUsage:
    card_word: str
    totals: UsageTotals


def _totals(rows: QuerySet[ContextUsage]) -> UsageTotals:
    sums = rows.aggregate(
        reports=Count("usage_id"),
        nexum_tokens=Sum("nexum_tokens"),
        prompt_tokens=Sum("prompt_tokens"),
        completion_tokens=Sum("completion_tokens"),
        cost_sum=Sum("cost"),
        costed_reports=Count("cost"),
    )
    return UsageTotals(
        reports=sums["reports"],
        nexum_tokens=sums["nexum_tokens"] or 0,
        prompt_tokens=sums["prompt_tokens"] or 0,
        completion_tokens=sums["completion_tokens"] or 0,
        cost=sums["cost_sum"],
        costed_reports=sums["costed_reports"],
    )


def usage_totals(
    *, project_id: str, task_id: str | None = None, goal_id: str | None = None
) -> tuple[UsageTotals, list[CardUsage]]:
    """The usage of the project, of one goal (its tasks' contexts) or of one task: the totals, and the
    totals per card. ``task_id`` and ``goal_id`` must name the project's task or goal (``NotFound``)."""
    rows = ContextUsage.objects.filter(project_id=project_id)
    if task_id is not None:
        task = Task.objects.filter(project_id=project_id, id=uuid_or_none(task_id), is_goal=False).first()
        if task is None:
            raise NotFound(f"no task {task_id}", field="task")
        rows = rows.filter(task_id=task.id)
    if goal_id is not None:
        goal = Task.objects.filter(project_id=project_id, id=uuid_or_none(goal_id), is_goal=True).first()
        if goal is None:
            raise NotFound(f"no goal {goal_id}", field="goal")
        rows = rows.filter(goal_id=goal.id)
    words = rows.order_by("card_word").values_list("card_word", flat=True).distinct()
    return _totals(rows), [CardUsage(word, _totals(rows.filter(card_word=word))) for word in words]
