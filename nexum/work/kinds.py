"""Kinds of requests that are dispatched to workers and leased while they run.

A kind names the Celery task that answers one request (it takes the request id only) and where the requests
of that kind live: a read model whose rows carry ``requested_at``, ``project_id`` and ``task_id``, and the
condition that says a row is still pending. Each app declares its kinds beside its tasks; ``config.bootstrap``
installs them, so the dispatcher, ``nexum_requeue`` and the dashboard know every kind without importing the
apps. A kind whose requests derive from the log rather than from an API call (webhook
deliveries) names ``prepare``: the dispatcher calls it at the start of each pass to record the requests due.

Every kind names ``in_flight_setting``, the setting that caps how many of one project's requests are in
flight at a time (sent and not yet answered), so one project's backlog holds a bounded share of its kind's
queue: a request is sent when it is recorded only while its project has room (``send_on_commit``);
otherwise, and for a kind whose requests derive from the log, the dispatcher's pass sends each project's
oldest due ones up to the cap, and a worker that finishes one sends the next of its project
(``nexum.work.dispatch``). Where each kind's task is queued is Celery's routing (``CELERY_TASK_ROUTES``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Model, Q


@dataclass(frozen=True)
class WorkKind:
    name: str
    task: Any  # the Celery task answering one request: ``task(request_id)``
    model: type[Model]
    id_field: str
    pending: Q
    in_flight_setting: str  # the setting capping one project's requests in flight
    prepare: Any = None  # ``prepare(now=...)``: record this kind's requests due from the log
    oldest_first: tuple[str, ...] = ("requested_at",)  # the order in which pending requests are sent

    @property
    def in_flight_per_project(self) -> int:
        """How many of one project's requests may be in flight at once."""
        return int(getattr(settings, self.in_flight_setting))

    def key(self, request_id: object) -> str:
        return f"{self.name}:{request_id}"

    def project_of(self, request_id: object) -> Any:
        """The request's project (``None`` when the request is not recorded): a ``Work`` row's project."""
        return (
            self.model._base_manager.filter(**{self.id_field: request_id})
            .values_list("project_id", flat=True)
            .first()
        )

    @property
    def admin_change_url_name(self) -> str:
        meta = self.model._meta
        return f"admin:{meta.app_label}_{meta.model_name}_change"


_installed: tuple[WorkKind, ...] = ()


def install(kinds: Sequence[WorkKind]) -> None:
    """Every kind of work, handed in once per process by ``config.bootstrap``."""
    global _installed
    _installed = tuple(kinds)


def work_kinds() -> list[WorkKind]:
    if not _installed:
        raise RuntimeError("no kind of work is installed: config.bootstrap runs when Django is ready")
    return list(_installed)
