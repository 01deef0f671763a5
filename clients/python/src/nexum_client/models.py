"""What the client returns: small frozen dataclasses with the members an agent loop reads, each keeping the
server's whole answer in ``raw`` (members the server adds later are there before this client names them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL_OUTCOMES = frozenset({"completed", "failed", "blocked", "skipped"})


@dataclass(frozen=True)
class Task:
    id: str
    goal_id: str
    key: str
    objective: str
    state: str
    version: int
    attempt: int
    depends_on: list[str]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Task:
        return cls(
            id=str(body["id"]),
            goal_id=str(body["goal_id"]),
            key=body.get("key", ""),
            objective=body.get("objective", ""),
            state=body["state"],
            version=int(body["version"]),
            attempt=int(body.get("attempt", 0)),
            depends_on=list(body.get("depends_on", [])),
            raw=body,
        )


@dataclass(frozen=True)
class Goal:
    id: str
    objective: str
    state: str
    tasks: list[Task]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Goal:
        return cls(
            id=str(body["id"]),
            objective=body.get("objective", ""),
            state=body.get("state", ""),
            tasks=[Task.from_json(task) for task in body.get("tasks", [])],
            raw=body,
        )

    def task(self, key: str) -> Task:
        """The goal's task with this plan key."""
        for task in self.tasks:
            if task.key == key:
                return task
        raise KeyError(key)


@dataclass(frozen=True)
class Fork:
    """A fork (an operator's ``fork_task``/``fork_goal``): its goal, the task it copied (a task's fork) and
    the fork's task for each source task."""

    goal_id: str
    task_id: str | None
    source_goal_id: str
    source_task_id: str | None
    at_position: int
    task_ids: dict[str, str]
    carried_items: int
    replayed: bool
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Fork:
        return cls(
            goal_id=str(body["goal_id"]),
            task_id=str(body["task_id"]) if body.get("task_id") else None,
            source_goal_id=str(body["source_goal_id"]),
            source_task_id=str(body["source_task_id"]) if body.get("source_task_id") else None,
            at_position=int(body["at_position"]),
            task_ids={str(source): str(fork) for source, fork in body.get("task_ids", {}).items()},
            carried_items=int(body.get("carried_items", 0)),
            replayed=bool(body.get("replayed", False)),
            raw=body,
        )


@dataclass(frozen=True)
class Item:
    """A world-state item: fact, decision, failure, artifact, progress note or tool call."""

    id: str
    kind: str
    text: str
    trust_class: str
    position: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Item:
        return cls(
            id=str(body["id"]),
            kind=body["kind"],
            text=body.get("text", ""),
            trust_class=body.get("trust_class", ""),
            position=int(body.get("position", 0)),
            raw=body,
        )


@dataclass(frozen=True)
class Context:
    """A compiled context for one model call: what the model sees and the tools to expose."""

    digest: str
    task_id: str
    model: str
    prompt_block: str
    tools: list[str]
    budget: dict[str, Any]
    total_tokens: int
    section_tokens: dict[str, int]
    request_id: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any], request_id: str | None = None) -> Context:
        return cls(
            digest=body["digest"],
            task_id=str(body.get("task_id", "")),
            model=body.get("model", ""),
            prompt_block=body.get("prompt_block", ""),
            tools=list(body.get("tools", [])),
            budget=dict(body.get("budget") or {}),
            total_tokens=int(body.get("total_tokens", 0)),
            section_tokens=dict(body.get("section_tokens") or {}),
            request_id=request_id,
            raw=body,
        )


@dataclass(frozen=True)
class Resolution:
    """A resolve of a task's context (the bundle, its completeness and the escalations it opened)."""

    resolve_id: str
    task_id: str
    bundle_digest: str
    complete: bool
    stop_reason: str
    escalations: list[dict[str, Any]]
    bundle: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Resolution:
        return cls(
            resolve_id=str(body["resolve_id"]),
            task_id=str(body["task_id"]),
            bundle_digest=body["bundle_digest"],
            complete=bool(body["complete"]),
            stop_reason=body.get("stop_reason", ""),
            escalations=list(body.get("escalations", [])),
            bundle=dict(body.get("bundle") or {}),
            raw=body,
        )


@dataclass(frozen=True)
class Completion:
    """A completion request and, once decided, the gate's decision."""

    request_id: str | None
    task_id: str
    status: str  # "pending" or "decided" ("decided" for a skipped request, which records nothing)
    outcome: str  # completed, failed, blocked, skipped or pending
    reason: str
    failing_checks: list[str]
    check_runs: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def decided(self) -> bool:
        return self.outcome in TERMINAL_OUTCOMES

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Completion:
        return cls(
            request_id=str(body["request_id"]) if body.get("request_id") else None,
            task_id=str(body.get("task_id", "")),
            status=body.get("status", ""),
            outcome=body.get("outcome", ""),
            reason=body.get("reason", ""),
            failing_checks=list(body.get("failing_checks", [])),
            check_runs=list(body.get("check_runs", [])),
            raw=body,
        )

    @classmethod
    def from_complete_answer(cls, body: dict[str, Any]) -> Completion:
        """From the answer of ``POST /tasks/{id}/complete``: ``{outcome, reason, task, completion, poll}``."""
        completion = body.get("completion")
        if completion:
            return cls.from_json({**completion, "outcome": body["outcome"], "reason": body["reason"]})
        return cls(
            request_id=None,
            task_id=str((body.get("task") or {}).get("id", "")),
            status="decided",
            outcome=body["outcome"],
            reason=body.get("reason", ""),
            failing_checks=[],
            check_runs=[],
            raw=body,
        )


@dataclass(frozen=True)
class Approval:
    """An operator's yes or no on one action of a task (its start, its completion, or an agent's own)."""

    id: str
    task_id: str
    action: str
    arguments_digest: str
    attempt: int
    state: str  # pending, granted or denied
    reason: str
    decision_reason: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def decided(self) -> bool:
        return self.state != "pending"

    @property
    def granted(self) -> bool:
        return self.state == "granted"

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Approval:
        return cls(
            id=str(body["id"]),
            task_id=str(body["task_id"]),
            action=body["action"],
            arguments_digest=body.get("arguments_digest", ""),
            attempt=int(body["attempt"]),
            state=body["state"],
            reason=body.get("reason", ""),
            decision_reason=body.get("decision_reason", ""),
            raw=body,
        )


@dataclass(frozen=True)
class Event:
    """One event of the log, as the feed shows it."""

    position: int
    stream_id: str
    version: int
    type: str
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Event:
        return cls(
            position=int(body["position"]),
            stream_id=body["stream_id"],
            version=int(body["version"]),
            type=body["type"],
            data=dict(body.get("data") or {}),
            metadata=dict(body.get("metadata") or {}),
            recorded_at=body.get("recorded_at", ""),
            raw=body,
        )
