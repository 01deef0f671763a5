"""The compile service's events (SPEC C8, C10–C12): compile requests, compiled contexts and compaction folds.

Streams. Every compile request has its own stream ``compile-<request_id>``: an asynchronous request starts
it with ``ContextCompileRequested`` (version 1) and ends it with ``ContextCompiled`` or
``ContextCompileFailed``; a synchronous compile writes ``ContextCompiled`` as version 1. The request id is
the idempotency key, and the stream version is the guard: a redelivered message finds the request already
answered and appends nothing. Folds of a task's progress and tool calls go to ``compaction-<task_id>``.

Events carry ids, digests and numbers only, never prompt text (R10): the prompt block lives in the
content-addressed store of compiled contexts, keyed by its digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexum.core.events import DomainEvent, event_type

REQUEST_QUEUED = "queued"
REQUEST_DONE = "done"
REQUEST_FAILED = "failed"
REQUEST_STATUSES = (REQUEST_QUEUED, REQUEST_DONE, REQUEST_FAILED)


def compile_stream(request_id: str) -> str:
    return f"compile-{request_id}"


def compaction_stream(task_id: str) -> str:
    return f"compaction-{task_id}"


# --- events -----------------------------------------------------------------------------------------------


@event_type("ContextCompileRequested")
@dataclass(frozen=True)
class ContextCompileRequested(DomainEvent):
    """An asynchronous compile was asked for; a worker answers it (``evidence_digest``: the request's extra
    evidence in the evidence store, or ``None``)."""

    request_id: str
    task_id: str
    goal_id: str
    model_word: str
    overrides: dict[str, int] = field(default_factory=dict)
    compaction: bool | None = None
    evidence_digest: str | None = None
    focus_digest: str | None = None
    """The request's ``focus``, kept with the request evidence (``None``: no focus)."""


@event_type("ContextCompiled")
@dataclass(frozen=True)
class ContextCompiled(DomainEvent):
    """A context was compiled for a task at log ``position`` with ``budget`` (the ``ModelBudget`` as a
    mapping, kept so a replay uses the very budget the compile had) and stored under ``digest``."""

    request_id: str
    task_id: str
    goal_id: str
    digest: str
    model_word: str
    position: int
    budget: dict[str, Any]
    encoding: str
    bundle_digest: str | None = None
    evidence_digest: str | None = None
    prompt_tokens: int = 0
    tool_tokens: int = 0
    included_count: int = 0
    excluded_count: int = 0
    compaction_threshold: int | None = None
    """The ``auto_compact_tokens`` the compile honoured (``None``: compaction off or no threshold): which
    folds it showed as summaries follows from it, so a replay needs it."""
    focus_digest: str | None = None
    """Where the request's ``focus`` (what the agent is working on now) is kept, beside the request evidence:
    it is part of the query, so a replay needs it (``None``: no focus)."""
    relevance_floor: float | None = None
    """The relevance floor the compile applied (version 4; ``None`` for a compile recorded before it)."""
    embedder: str | None = None
    """``name@version`` of the embedder the compile ranked by (version 5); empty: by words alone; ``None``
    for a compile recorded before embedders (replayed by words alone)."""


@event_type("ContextCompileFailed")
@dataclass(frozen=True)
class ContextCompileFailed(DomainEvent):
    """An asynchronous compile was refused (budget too small, the model word unknown by now, …)."""

    request_id: str
    task_id: str
    code: str
    message: str
    field: str | None = None


@event_type("ContextCompacted")
@dataclass(frozen=True)
class ContextCompacted(DomainEvent):
    """The oldest progress notes and tool calls of a task were folded into the summary item ``summary_id``
    (a progress note recorded in the same transaction). The folded items stay in the log and in the world
    state; the compiler sees the summary instead of them."""

    fold_id: str
    task_id: str
    goal_id: str
    summary_id: str
    folded_ids: list[str]
    folded_tokens: int
    threshold: int
    encoding: str
    summarizer: str
