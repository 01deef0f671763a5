"""``GET /metrics``: Prometheus' scrape of a Nexum deployment, and the request latency it reports.

What it answers: the processes' counters and histograms (``nexum.adapters.metrics``: request latency by route,
compile latency and tokens by model word, completions by outcome, lease takeovers, failed checks by reason),
summed across processes under gunicorn and Celery, and the gauges of the current state computed from the
database now, by the functions of ``STATE_GAUGES`` (requests pending and stuck by work kind, the webhook
backlog and the log's head per project). A new gauge of state (the usage ledger's drift) is one more function
there.

Who may scrape: an operator token, or the scrape token ``NEXUM_METRICS_TOKEN`` sent as ``Bearer`` (what a
Prometheus server is given). No token is 401, an unknown one 401, an agent token 403, all in the API's error
shape. An operator token's scrape shows the series per project of its own project only; the scrape token's,
every project's. It is not in the OpenAPI schema: its answer is Prometheus' text format, not the JSON API.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from prometheus_client.core import GaugeMetricFamily
from rest_framework import authentication, permissions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from context_app.compilation.selectors.usage import drift_per_card
from nexum.adapters import metrics
from nexum.core.errors import Forbidden
from nexum.core.roles import OPERATOR
from nexum.eventstore.models import Event
from nexum.work.kinds import work_kinds
from nexum.work.selectors import pending_count, stuck_count
from nexum_web.api.auth import AgentTokenAuthentication, ProjectAgent
from nexum_web.api.strict import DeclaredQueryOnly
from nexum_web.webhooks.models import PENDING, Webhook, WebhookDelivery
from tasks_app.models import Project

# --- who may scrape -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScrapeClient:
    """A caller holding ``NEXUM_METRICS_TOKEN``: it may read the metrics, nothing else."""

    is_authenticated = True
    is_anonymous = False


class MetricsAuthentication(AgentTokenAuthentication):
    """The scrape token (``NEXUM_METRICS_TOKEN``, compared in constant time) or a project's token."""

    def authenticate(self, request: HttpRequest) -> tuple[Any, Any] | None:
        configured = settings.NEXUM_METRICS_TOKEN
        header = authentication.get_authorization_header(request).split()
        bearer = len(header) == 2 and header[0].lower() in (b"bearer", b"token")
        if configured and bearer and hmac.compare_digest(header[1], configured.encode("ascii")):
            return ScrapeClient(), None
        return super().authenticate(request)


class MetricsReaders(permissions.BasePermission):
    """The scrape token or an operator token; an agent token is refused (403 ``forbidden``), no token 401."""

    def has_permission(self, request: Request, view: object) -> bool:
        user = request.user
        if isinstance(user, ScrapeClient):
            return True
        if not isinstance(user, ProjectAgent):
            return False  # DRF answers 401 not_authenticated
        if user.role != OPERATOR:
            raise Forbidden(
                f"the metrics need an operator token or the scrape token (NEXUM_METRICS_TOKEN); this is an"
                f" {user.role} token",
                details={"role": user.role, "needs": OPERATOR},
            )
        return True


class ErrorsAsJson(BaseContentNegotiation):
    """Refusals are JSON whatever the scraper accepts (Prometheus asks for its text formats); the scrape's own
    answer is Prometheus' text, written by the view."""

    def select_parser(self, request: Request, parsers: Sequence[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: Sequence[Any], format_suffix: str | None = None):
        return renderers[0], renderers[0].media_type


class MetricsView(APIView):
    authentication_classes = [MetricsAuthentication]
    permission_classes = [MetricsReaders, DeclaredQueryOnly]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = ErrorsAsJson

    @extend_schema(exclude=True)
    def get(self, request: Request) -> HttpResponse:
        user = request.user
        scope = None if isinstance(user, ScrapeClient) else [user.project_id]
        body, content_type = metrics.exposition([StateCollector(scope)])
        return HttpResponse(body, content_type=content_type)


# --- gauges of the current state, computed at scrape time ---------------------------------------------------


def _head_of(project: Any) -> Subquery:
    """The project-position of the last event of the project ``project`` refers to (one index probe)."""
    last = Event.objects.filter(project_id=project).order_by("-project_position")
    return Subquery(last.values("project_position")[:1])


def requests_in_flight(projects: Sequence[str] | None) -> Iterator[GaugeMetricFamily]:
    """Pending and stuck requests of every work kind (``nexum.work.selectors``), across projects."""
    now = timezone.now()
    pending = GaugeMetricFamily(
        "nexum_requests_pending", "Requests recorded and not yet answered, by work kind", labels=["kind"]
    )
    stuck = GaugeMetricFamily(
        "nexum_requests_stuck",
        "Pending requests older than a lease's lifetime that no live lease covers and no project cap holds"
        " back (the dashboard's stuck list; nexum_requeue --stuck sends them), by work kind",
        labels=["kind"],
    )
    for kind in work_kinds():
        pending.add_metric([kind.name], pending_count(kind))
        stuck.add_metric([kind.name], stuck_count(kind, now))
    yield pending
    yield stuck


def project_logs(projects: Sequence[str] | None) -> Iterator[GaugeMetricFamily]:
    """Per project: its log's head, and its webhooks' backlog (deliveries pending, events not yet recorded
    as deliveries: past an active webhook's cursor)."""
    chosen = Project.objects.all() if projects is None else Project.objects.filter(id__in=projects)
    rows = chosen.annotate(head=Coalesce(_head_of(OuterRef("pk")), 0)).values_list("id", "slug", "head")
    slugs: dict[Any, str] = {}
    heads: dict[Any, int] = {}
    for project, slug, head in rows:
        slugs[project], heads[project] = slug, head
    delivering = WebhookDelivery.objects.filter(state=PENDING, project_id__in=list(slugs))
    by_project = delivering.order_by().values("project_id").annotate(n=Count("pk"))
    pending = dict(by_project.values_list("project_id", "n"))
    active = Webhook.objects.filter(active=True, project_id__in=list(slugs))
    cursors = active.values_list("project_id", "cursor")
    unrecorded: dict[Any, int] = {}
    for project, cursor in cursors:
        unrecorded[project] = unrecorded.get(project, 0) + max(heads.get(project, 0) - cursor, 0)

    head = GaugeMetricFamily(
        "nexum_event_log_head",
        "The position of the project's last event in its log (gapless from 1): the events it has recorded",
        labels=["project"],
    )
    backlog = GaugeMetricFamily(
        "nexum_webhook_backlog",
        "Webhook deliveries to make, by project: pending (recorded, not yet delivered or given up) and"
        " unrecorded (events past an active webhook's cursor, recorded by the dispatcher's next pass)",
        labels=["project", "stage"],
    )
    for project, slug in sorted(slugs.items(), key=lambda item: item[1]):
        head.add_metric([slug], heads.get(project, 0))
        backlog.add_metric([slug, "pending"], pending.get(project, 0))
        backlog.add_metric([slug, "unrecorded"], unrecorded.get(project, 0))
    yield head
    yield backlog


def card_drift(projects: Sequence[str] | None) -> Iterator[GaugeMetricFamily]:
    """Per project and card with usage reported: the p50 and p95 drift of the provider's prompt tokens from
    Nexum's count, (provider - nexum) / nexum over the card's latest reports, and whether it is past
    ``NEXUM_USAGE_DRIFT_THRESHOLD`` (the dashboard's drifting cards)."""
    shown = None if projects is None else {str(project) for project in projects}
    drifts = [drift for drift in drift_per_card() if shown is None or drift.project_id in shown]
    chosen = Project.objects.filter(id__in={drift.project_id for drift in drifts})
    slugs = {str(project): slug for project, slug in chosen.values_list("id", "slug")}
    drift = GaugeMetricFamily(
        "nexum_card_prompt_drift",
        "The provider's prompt tokens against Nexum's count, (provider - nexum) / nexum, at a quantile of the"
        " card's latest reports, by project and card word",
        labels=["project", "card", "quantile"],
    )
    drifting = GaugeMetricFamily(
        "nexum_card_drifting",
        "1 when the card's p95 drift is past NEXUM_USAGE_DRIFT_THRESHOLD: its budget may overflow the window",
        labels=["project", "card"],
    )
    for card in drifts:
        slug = slugs[card.project_id]
        drift.add_metric([slug, card.card_word, "0.5"], card.summary.p50)
        drift.add_metric([slug, card.card_word, "0.95"], card.summary.p95)
        drifting.add_metric([slug, card.card_word], int(card.drifting))
    yield drift
    yield drifting


STATE_GAUGES: tuple[Callable[[Sequence[str] | None], Iterator[GaugeMetricFamily]], ...] = (
    requests_in_flight,
    project_logs,
    card_drift,
)
"""The gauges of state, each ``gauge(projects)``: ``projects`` None for every project, else the ids shown."""


class StateCollector:
    """The gauges of ``STATE_GAUGES``, computed when the scrape collects them, and how long they took."""

    def __init__(self, projects: Sequence[str] | None) -> None:
        self.projects = projects

    def collect(self) -> Iterator[GaugeMetricFamily]:
        started = time.perf_counter()
        for gauge in STATE_GAUGES:
            yield from gauge(self.projects)
        yield GaugeMetricFamily(
            "nexum_metrics_state_seconds",
            "Time this scrape took to compute the gauges of state from the database",
            value=time.perf_counter() - started,
        )


# --- request latency ----------------------------------------------------------------------------------------

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetricsMiddleware:
    """Times every request (until its answer's headers: an event stream counts its start) by the URL pattern
    it matched, never its path, so a label's values are the routes; a method outside HTTP's own is
    ``other``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        metrics.request_answered(
            route=match.route if match is not None else None,
            method=request.method if request.method in METHODS else "other",
            status=response.status_code,
            seconds=time.perf_counter() - started,
        )
        return response
