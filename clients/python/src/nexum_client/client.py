"""``Nexum``: the agent loop's calls to Nexum's REST API (``/api/v1/``), over one ``httpx.Client``.

Retries. A request that gets no answer (the connection failed, was dropped or timed out) or a 502, 503 or 504
(429 too) is sent again, up to ``retries`` more times, waiting ``backoff_s`` × 1, 2, 4 … (at most
``backoff_max_s``, or the server's ``Retry-After``, e.g. 503 ``database_unavailable`` while the server's
database is down). Every write (POST, PUT, PATCH, DELETE) carries an ``Idempotency-Key`` made once per call
and sent again with each retry, so a write whose answer was lost is written once: the server answers the
retry as it answered the first (README, API). Pass ``idempotency_key=`` to name a call yourself (to retry it
across processes). Errors are raised as typed exceptions (``nexum_client.errors``) carrying ``code``,
``field``, ``details`` and ``request_id``.

Read-your-writes. A server with a read replica answers compiles and reads from it; the client remembers the
``Nexum-Position`` of its last write's answer and sends it as ``Nexum-Min-Position`` on every later request,
so what it reads includes what it wrote (the server waits a bounded time for the replica, then reads from
the primary). ``read_your_writes=False`` sends nothing: reads may then miss the newest writes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from nexum_client.errors import (
    ApprovalTimeout,
    CompletionTimeout,
    Conflict,
    ConnectionFailed,
    NexumError,
    error_from_response,
)
from nexum_client.models import Approval, Completion, Context, Event, Fork, Goal, Item, Resolution, Task

logger = logging.getLogger("nexum_client")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
API_PREFIX = "/api/v1/"
POSITION_HEADER = "Nexum-Position"
MIN_POSITION_HEADER = "Nexum-Min-Position"


class Nexum:
    """A client of one Nexum server with one token (an agent's or an operator's).

    ``transport`` replaces httpx's (tests inject faults with it); ``sleep`` replaces ``time.sleep``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Any = time.sleep,
        read_your_writes: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.read_your_writes = read_your_writes
        self.last_position = 0
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url + API_PREFIX,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Nexum:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the one way requests are made ------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[int, Any]:
        """Send a request (retried as the module docstring says); the status and the decoded JSON body.
        ``path`` is relative to ``/api/v1/``. Raises a ``NexumError`` for an error answer."""
        headers = {}
        if method.upper() not in SAFE_METHODS:
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        if self.read_your_writes and self.last_position:
            headers[MIN_POSITION_HEADER] = str(self.last_position)
        params = {name: value for name, value in (params or {}).items() if value is not None}
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._http.request(method, path, json=json, params=params, headers=headers)
            except httpx.TransportError as error:
                if last:
                    raise ConnectionFailed(
                        f"{method} {path}: no answer after {attempt + 1} attempts: {error!r}",
                        code="connection_failed",
                    ) from error
                self._wait(attempt, None, f"{method} {path}: {error!r}")
                continue
            if response.status_code in RETRY_STATUSES and not last:
                self._wait(
                    attempt, response.headers.get("Retry-After"), f"{method} {path}: {response.status_code}"
                )
                continue
            self._note_position(response)
            return response.status_code, self._decoded(response)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _note_position(self, response: httpx.Response) -> None:
        position = response.headers.get(POSITION_HEADER, "")
        if position.isdigit():
            self.last_position = max(self.last_position, int(position))

    def _decoded(self, response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise error_from_response(response.status_code, body, response.headers.get("X-Request-ID"))
        return body

    def _wait(self, attempt: int, retry_after: str | None, why: str) -> None:
        delay = min(self.backoff_s * 2**attempt, self.backoff_max_s)
        if retry_after is not None and retry_after.isdigit():
            delay = min(float(retry_after), self.backoff_max_s)
        logger.warning("%s; retrying in %.2f s (attempt %d of %d)", why, delay, attempt + 2, self.retries + 1)
        self._sleep(delay)

    def _get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)[1]

    def _post(self, path: str, body: dict[str, Any], idempotency_key: str | None = None) -> Any:
        payload = {name: value for name, value in body.items() if value is not None}
        return self.request("POST", path, json=payload, idempotency_key=idempotency_key)[1]

    def _pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every result of a list endpoint, following ``next_cursor`` until it is null."""
        params = dict(params)
        while True:
            body = self._get(path, **params)
            yield from body["results"]
            if body["next_cursor"] is None:
                return
            params["cursor"] = body["next_cursor"]

    # --- goals and tasks --------------------------------------------------------------------------------

    def create_goal(
        self,
        objective: str,
        *,
        tasks: list[dict[str, Any]],
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Goal:
        """A goal with its plan (``tasks``: ``key``, ``objective``, ``depends_on`` …). ``fields``: ``inputs``,
        ``constraints``, ``success_criteria``, ``risk`` and, for an operator, ``contracts``."""
        return Goal.from_json(
            self._post("goals", {"objective": objective, "tasks": tasks, **fields}, idempotency_key)
        )

    def goal(self, goal_id: str) -> Goal:
        return Goal.from_json(self._get(f"goals/{goal_id}"))

    def task(self, task_id: str) -> Task:
        return Task.from_json(self._get(f"tasks/{task_id}"))

    def tasks(
        self, *, goal_id: str | None = None, state: str | None = None, limit: int = 50
    ) -> Iterator[Task]:
        for body in self._pages("tasks", {"goal": goal_id, "state": state, "limit": limit}):
            yield Task.from_json(body)

    def fork_task(
        self, task_id: str, *, at_position: int, reason: str, idempotency_key: str | None = None
    ) -> Fork:
        """An operator's: a new goal with the task (and the steps it refines) and its world as they stood at
        log ``at_position`` (a compile's ``position``, an event's); the source is untouched."""
        body = {"at_position": at_position, "reason": reason}
        return Fork.from_json(self._post(f"tasks/{task_id}/fork", body, idempotency_key))

    def fork_goal(
        self, goal_id: str, *, at_position: int, reason: str, idempotency_key: str | None = None
    ) -> Fork:
        """An operator's: a new goal with the goal's plan (every task pending) and world as of
        ``at_position``."""
        body = {"at_position": at_position, "reason": reason}
        return Fork.from_json(self._post(f"goals/{goal_id}/fork", body, idempotency_key))

    def _transition(
        self, command: str, task_id: str, expected_version: int | None, reason: str | None
    ) -> Task:
        body = {"expected_version": expected_version, "reason": reason}
        return Task.from_json(self._post(f"tasks/{task_id}/{command}", body))

    def start(self, task_id: str, *, expected_version: int | None = None, reason: str | None = None) -> Task:
        """pending → running, or failed → running (a retry: the attempt rises)."""
        return self._transition("start", task_id, expected_version, reason)

    def fail(self, task_id: str, *, expected_version: int | None = None, reason: str | None = None) -> Task:
        return self._transition("fail", task_id, expected_version, reason)

    def block(self, task_id: str, *, expected_version: int | None = None, reason: str | None = None) -> Task:
        return self._transition("block", task_id, expected_version, reason)

    # --- world state ------------------------------------------------------------------------------------

    def _record(self, noun: str, task_id: str | None, goal_id: str | None, body: dict[str, Any]) -> Item:
        if (task_id is None) == (goal_id is None):
            raise ValueError("give task_id or goal_id, exactly one")
        scope = f"tasks/{task_id}" if task_id is not None else f"goals/{goal_id}"
        return Item.from_json(self._post(f"{scope}/{noun}", body))

    def record_fact(
        self,
        text: str,
        *,
        task_id: str | None = None,
        goal_id: str | None = None,
        subject: str | None = None,
        source: str | None = None,
        verified: bool | None = None,
        observed_at: str | None = None,
        trust_class: str | None = None,
    ) -> Item:
        body = {
            "text": text,
            "subject": subject,
            "source": source,
            "verified": verified,
            "observed_at": observed_at,
            "trust_class": trust_class,
        }
        return self._record("facts", task_id, goal_id, body)

    def record_decision(
        self,
        text: str,
        *,
        task_id: str | None = None,
        goal_id: str | None = None,
        rationale: str | None = None,
        trust_class: str | None = None,
    ) -> Item:
        body = {"text": text, "rationale": rationale, "trust_class": trust_class}
        return self._record("decisions", task_id, goal_id, body)

    def record_failure(
        self, task_id: str, text: str, *, attempt: int | None = None, trust_class: str | None = None
    ) -> Item:
        body = {"text": text, "attempt": attempt, "trust_class": trust_class}
        return self._record("failures", task_id, None, body)

    def record_progress(
        self,
        text: str,
        *,
        task_id: str | None = None,
        goal_id: str | None = None,
        trust_class: str | None = None,
    ) -> Item:
        return self._record("progress", task_id, goal_id, {"text": text, "trust_class": trust_class})

    def record_tool_call(
        self,
        task_id: str,
        tool: str,
        result_summary: str,
        *,
        arguments: Any = None,
        arguments_digest: str | None = None,
        trust_class: str | None = None,
    ) -> Item:
        """A tool call the agent made; the server keeps only the arguments' digest."""
        body = {
            "tool": tool,
            "result_summary": result_summary,
            "arguments": arguments,
            "arguments_digest": arguments_digest,
            "trust_class": trust_class,
        }
        return self._record("tool-calls", task_id, None, body)

    def record_artifact(
        self,
        summary: str,
        *,
        task_id: str | None = None,
        goal_id: str | None = None,
        uri: str | None = None,
        excerpt: str | None = None,
        media_type: str | None = None,
        content_text: str | None = None,
        trust_class: str | None = None,
    ) -> Item:
        """An artifact; ``content_text`` is stored by its sha256 on the server."""
        body = {
            "summary": summary,
            "uri": uri,
            "excerpt": excerpt,
            "media_type": media_type,
            "content_text": content_text,
            "trust_class": trust_class,
        }
        return self._record("artifacts", task_id, goal_id, body)

    def items(
        self,
        *,
        task_id: str | None = None,
        goal_id: str | None = None,
        kind: str | None = None,
        own: bool | None = None,
        current: bool | None = None,
        limit: int = 100,
    ) -> Iterator[Item]:
        """World-state items in log order, page after page: what a task sees (its own and its goal's; ``own``
        for its own only) or a goal's; ``kind`` one of fact, decision, failure, artifact, progress,
        tool_call; ``current`` leaves out superseded and retracted facts."""
        params = {"task": task_id, "goal": goal_id, "kind": kind, "limit": limit}
        params |= {name: "true" for name, flag in (("own", own), ("current", current)) if flag}
        for body in self._pages("items", params):
            yield Item.from_json(body)

    def retract_fact(self, fact_id: str, *, reason: str, expected_version: int | None = None) -> Item:
        """Retract a current fact (it stays in the history). A fact above the token's ceiling (an operator's,
        for an agent token) raises ``Forbidden`` with ``field == "trust_class"``; nothing is written."""
        body = {"reason": reason, "expected_version": expected_version}
        return Item.from_json(self._post(f"facts/{fact_id}/retract", body))

    def supersede_fact(
        self,
        fact_id: str,
        text: str,
        *,
        reason: str | None = None,
        subject: str | None = None,
        source: str | None = None,
        trust_class: str | None = None,
        expected_version: int | None = None,
    ) -> Item:
        """Replace a current fact by a new one in its scope; returns the new fact. Refused like
        ``retract_fact`` for a fact above the token's ceiling."""
        body = {
            "text": text,
            "reason": reason,
            "subject": subject,
            "source": source,
            "trust_class": trust_class,
            "expected_version": expected_version,
        }
        return Item.from_json(self._post(f"facts/{fact_id}/supersede", body))

    # --- context ----------------------------------------------------------------------------------------

    def resolve(
        self,
        task_id: str,
        *,
        max_items: int | None = None,
        max_tokens: int | None = None,
        sources: dict[str, list[str]] | None = None,
        query: str | None = None,
    ) -> Resolution:
        """Resolve the task's context under its grants: the bundle, and the escalations it opened."""
        body = {"max_items": max_items, "max_tokens": max_tokens, "sources": sources, "query": query}
        return Resolution.from_json(self._post(f"tasks/{task_id}/resolve", body))

    def compile(
        self,
        task_id: str,
        model: str,
        *,
        overrides: dict[str, int] | None = None,
        evidence: list[dict[str, Any]] | None = None,
        compaction: bool | None = None,
        focus: str | None = None,
    ) -> Context:
        """The task's context for one call of ``model`` (a catalog word): prompt block, tools, budget.
        ``focus`` says what the agent is working on now: it ranks the facts beside the step and is shown in
        the current step."""
        body = {
            "model": model,
            "overrides": overrides,
            "evidence": evidence,
            "compaction": compaction,
            "focus": focus,
        }
        answer = self._post(f"tasks/{task_id}/compile", body)
        return Context.from_json(answer["context"], request_id=answer.get("request_id"))

    def context(self, digest: str) -> Context:
        return Context.from_json(self._get(f"contexts/{digest}"))

    def excluded(self, digest: str, *, limit: int = 500) -> Iterator[dict[str, Any]]:
        """Every item and tool a compiled context left out, in order (``kind``, ``id``, ``tokens_needed``,
        ``tokens_left``, ``reason``), fetched a page at a time; a compile's answer only counts them."""
        return self._pages(f"contexts/{digest}/excluded", {"limit": limit})

    def report_usage(
        self,
        digest: str,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        provider: str,
        model: str,
        cost: float | str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Report what the provider counted for the model call made with the context ``digest`` (its
        ``usage``: prompt and completion tokens, and the cost if known). Returns the report with its
        ``drift``, ``(prompt_tokens - nexum_tokens) / nexum_tokens``."""
        body = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "provider": provider,
            "model": model,
            "cost": cost,
        }
        return self._post(f"contexts/{digest}/usage", body, idempotency_key)

    def usage(self, *, goal_id: str | None = None, task_id: str | None = None) -> dict[str, Any]:
        """Usage totals of the project, or of one goal or task (``totals`` and ``by_card``)."""
        return self._get("usage", goal=goal_id, task=task_id)

    # --- the gate ---------------------------------------------------------------------------------------

    def complete(
        self,
        task_id: str,
        answer: str | None = None,
        *,
        expected_version: int | None = None,
        wait: bool = True,
        timeout_s: float = 600.0,
        poll_interval_s: float = 0.5,
    ) -> Completion:
        """Ask the verification gate to complete a running task; its checks decide, the answer is recorded
        beside them. With ``wait`` (the default) a pending request is polled until the gate decides
        (``CompletionTimeout`` after ``timeout_s``); a request already pending for this task version is
        followed rather than refused."""
        try:
            answer_body = self._post(
                f"tasks/{task_id}/complete", {"answer": answer, "expected_version": expected_version}
            )
        except Conflict as error:
            pending_id = error.details.get("request_id") if error.code == "completion_pending" else None
            if not wait or not pending_id:
                raise
            return self.wait_for_completion(
                str(pending_id), timeout_s=timeout_s, poll_interval_s=poll_interval_s
            )
        completion = Completion.from_complete_answer(answer_body)
        if completion.decided or not wait:
            return completion
        assert completion.request_id is not None
        return self.wait_for_completion(
            completion.request_id, timeout_s=timeout_s, poll_interval_s=poll_interval_s
        )

    def completion(self, request_id: str) -> Completion:
        return Completion.from_json(self._get(f"completions/{request_id}"))

    def wait_for_completion(
        self, request_id: str, *, timeout_s: float = 600.0, poll_interval_s: float = 0.5
    ) -> Completion:
        """Poll a completion request until the gate decides it."""
        deadline = time.monotonic() + timeout_s
        while True:
            completion = self.completion(request_id)
            if completion.decided:
                return completion
            if time.monotonic() >= deadline:
                raise CompletionTimeout(
                    f"completion {request_id} still pending after {timeout_s:.0f} s",
                    code="completion_timeout",
                    details={"request_id": request_id},
                )
            self._sleep(poll_interval_s)

    # --- approvals --------------------------------------------------------------------------------------

    def request_approval(
        self,
        task_id: str,
        action: str,
        *,
        reason: str,
        arguments_digest: str | None = None,
        idempotency_key: str | None = None,
    ) -> Approval:
        """Ask an operator to approve ``action`` on the task's current attempt: one of the agent's own
        (``arguments_digest``: the sha256 of its arguments), or ``start`` / ``complete`` again after a
        denial. A start or completion that needs an approval raises ``Conflict`` with code
        ``approval_required`` (``details["approval_id"]``) until it is granted."""
        body: dict[str, Any] = {"action": action, "reason": reason}
        if arguments_digest is not None:
            body["arguments_digest"] = arguments_digest
        return Approval.from_json(self._post(f"tasks/{task_id}/approvals", body, idempotency_key))

    def approval(self, approval_id: str) -> Approval:
        return Approval.from_json(self._get(f"approvals/{approval_id}"))

    def approvals(self, *, task_id: str | None = None, state: str | None = None) -> Iterator[Approval]:
        """The project's approvals, newest first, every page."""
        params = {"task": task_id, "state": state}
        for row in self._pages("approvals", {name: value for name, value in params.items() if value}):
            yield Approval.from_json(row)

    def wait_for_approval(
        self, approval_id: str, *, timeout_s: float = 3600.0, poll_interval_s: float = 2.0
    ) -> Approval:
        """Poll an approval until an operator grants or denies it; ``ApprovalTimeout`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            approval = self.approval(approval_id)
            if approval.decided:
                return approval
            if time.monotonic() >= deadline:
                raise ApprovalTimeout(
                    f"approval {approval_id} still pending after {timeout_s:.0f} s",
                    code="approval_timeout",
                    details={"approval_id": approval_id},
                )
            self._sleep(poll_interval_s)

    # --- the event feed ---------------------------------------------------------------------------------

    def events(
        self,
        *,
        cursor: str | int | None = None,
        limit: int = 100,
        follow: bool = False,
        poll_interval_s: float = 1.0,
        idle_timeout_s: float | None = None,
    ) -> Iterator[Event]:
        """The project's events in order after ``cursor`` (a position in the project's log; none: from the
        start), following ``next_cursor`` page by page. With ``follow`` it then waits for new events, polling
        every ``poll_interval_s``, until ``idle_timeout_s`` passes without one (forever when None)."""
        position = cursor
        idle_since = time.monotonic()
        while True:
            events, next_cursor = self._event_page(position, limit)
            for event in events:
                yield event
                position = event.position
            if events:
                idle_since = time.monotonic()
            if next_cursor is not None and events:
                position = next_cursor
                continue
            if not follow:
                return
            if idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                return
            self._sleep(poll_interval_s)

    def _event_page(self, cursor: str | int | None, limit: int) -> tuple[list[Event], str | int | None]:
        body = self._get("events", cursor=cursor, limit=limit)
        return [Event.from_json(event) for event in body["results"]], body["next_cursor"]


__all__ = ["Nexum", "NexumError"]
