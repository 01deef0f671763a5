"""What the layers above do when a goal is created or a task is about to start, without this app importing
them (issue 14: one direction of dependency).

The approval gate (``TaskStartDecided``) is the one handler that writes before it refuses: it records the
approval it asks an operator for (``ApprovalRequested``), and the start is refused 409 ``approval_required``
naming it; nothing else is written.

``tasks_app`` sits below the layers that react to its commands: verification registers a goal's contracts,
resolution's plan gate may refuse a start. A service here announces a message; every handler registered for
its type runs at once, in registration order, inside the service's transaction, and an error it raises is the
service's error (nothing is written). A message nobody handles is a wiring mistake, never a silent no-op.
Who reacts to what is one table, ``config.bootstrap.MESSAGE_HANDLERS``, wired when Django starts
(``config.apps.BootstrapConfig``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GoalContractsGiven:
    """A goal was created with ``contracts`` (task key → contract) in the same request; handlers register
    them in the goal's transaction. ``origin``: the declared ``trust_class`` and ``derived_from`` item ids."""

    project_id: str
    task_ids: Mapping[str, str]
    contracts: object
    origin: Mapping[str, Any] | None
    actor: str
    idempotency_key: str | None


@dataclass(frozen=True)
class TaskStarting:
    """A task is about to start (or restart); a handler is a start guard: it refuses by raising."""

    project_id: str
    task_id: str


@dataclass(frozen=True)
class TaskStartDecided:
    """A task may start as far as its own lifecycle and every start guard say (``attempt``: the attempt it
    would begin); a handler is the last guard: the approval gate, which may record that it asks an operator
    (``actor``: who asked to start) before it refuses."""

    project_id: str
    task_id: str
    attempt: int
    actor: str


Handler = Callable[[Any], None]
_handlers: dict[type, list[Handler]] = {}


def register(message_type: type, handler: Handler) -> None:
    """Let ``handler`` react to every message of ``message_type`` (registering it again changes nothing)."""
    handlers = _handlers.setdefault(message_type, [])
    if handler not in handlers:
        handlers.append(handler)


def handle(message: object) -> None:
    """Run every handler of ``message``'s type, in registration order."""
    handlers = _handlers.get(type(message))
    if not handlers:
        raise RuntimeError(
            f"no handler is registered for {type(message).__name__} (config.bootstrap.MESSAGE_HANDLERS)"
        )
    for handler in handlers:
        handler(message)
