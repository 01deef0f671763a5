"""One place wires what the lower layers are handed from above (Cosmic Python's ``bootstrap.py``).

A lower layer never imports the layers above it (``docs/ARCHITECTURE.md``), yet the event store applies the
apps' projections, the dispatcher sends the apps' kinds of work, and the task graph's messages are answered
by verification and resolution. Each of those lower layers keeps a registry it is handed these through, and
this module hands them in, once per process, when Django is ready (``config.apps.BootstrapConfig``, the last
installed app, in the web server, the workers and every management command).

Kinds that live in one package (check kinds, source kinds) and event types register themselves instead, with
a decorator in their own module (``@check_kind``, ``@source_kind``, ``@event_type``): adding one touches no
table here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.conf import settings

from config import celery
from context_app.catalog.projections import ModelCatalogProjection
from context_app.compilation.projections import CompilationProjection, RetentionProjection, UsageProjection
from context_app.compilation.tasks import COMPILE, RETENTION
from context_app.resolution.projections import ResolutionProjection
from context_app.resolution.tasks import RESOLVE
from context_app.world import system_checks as world_system_checks
from context_app.world.projections import WorldProjection
from nexum.adapters import telemetry
from nexum.eventstore import projections
from nexum.eventstore.projections import Projection
from nexum.work import kinds
from nexum.work.kinds import WorkKind
from nexum_web import handlers
from nexum_web.webhooks.tasks import DELIVERY
from tasks_app import hooks
from tasks_app.hooks import GoalContractsGiven, TaskStartDecided, TaskStarting
from tasks_app.projections import ProjectProjection, TaskProjection
from verification_app import system_checks as sandbox_system_checks
from verification_app.projections import VerificationProjection
from verification_app.tasks import COMPLETION

PROJECTIONS: Sequence[type[Projection]] = (
    ProjectProjection,
    TaskProjection,
    ModelCatalogProjection,
    WorldProjection,
    ResolutionProjection,
    CompilationProjection,
    UsageProjection,
    RetentionProjection,
    VerificationProjection,
)
"""Every projection, in the order an event is applied and the read models are rebuilt: parents first."""

WORK_KINDS: Sequence[WorkKind] = (COMPLETION, COMPILE, RESOLVE, DELIVERY, RETENTION)
"""Every kind of request dispatched to workers and leased while it runs (``nexum.work``)."""

MESSAGE_HANDLERS: Mapping[type, Sequence[hooks.Handler]] = {
    GoalContractsGiven: (handlers.register_goal_contracts,),
    TaskStarting: (handlers.guard_plan_gate,),
    TaskStartDecided: (handlers.guard_start_approval,),
}
"""Who reacts to the task graph's messages (``tasks_app/hooks.py``), in the order they run."""


SYSTEM_CHECKS = (world_system_checks, sandbox_system_checks)
"""The modules whose Django system checks (``manage.py check`` and every start) they register on import."""

CELERY_APP = celery.app
"""The Celery app every ``shared_task`` binds to, created before any task is sent."""


def bootstrap() -> None:
    # Before any request or connection is made: see nexum.adapters.telemetry.
    telemetry.tracing_from_environment(statements=settings.NEXUM_TRACE_SQL)
    projections.install(PROJECTIONS)
    kinds.install(WORK_KINDS)
    for message_type, message_handlers in MESSAGE_HANDLERS.items():
        for handler in message_handlers:
            hooks.register(message_type, handler)
