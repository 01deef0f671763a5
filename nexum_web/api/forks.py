"""Forks (issue 27): ``POST /tasks/{id}/fork`` and ``POST /goals/{id}/fork``, an operator's calls.

A fork is a new goal whose world is the source's as it stood at a past log position
(``context_app.compilation.forks``). The body's ``key`` (or the ``Idempotency-Key`` header) makes a retry
return the first fork; the same key for another fork is a 409.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from context_app.compilation import forks
from nexum.core.text import MAX_REASON_CHARS, NOT_BLANK
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, KEY_MAX, idempotency_key
from nexum_web.api.strict import StrictInput


class ForkRequestSerializer(StrictInput):
    at_position = serializers.IntegerField(
        min_value=1,
        help_text="the log position whose state the fork starts from (a compile's or an event's position); "
        "outside the project's log: 422 position_outside_log",
    )
    reason = serializers.CharField(max_length=MAX_REASON_CHARS, help_text="why the fork is made")
    key = serializers.RegexField(
        NOT_BLANK,
        max_length=KEY_MAX,
        required=False,
        help_text="makes the call safe to retry: the same key returns the first fork, writing nothing",
    )


class ForkSerializer(serializers.Serializer):
    goal_id = serializers.UUIDField(help_text="the fork's goal")
    task_id = serializers.UUIDField(
        allow_null=True, help_text="a task's fork: the fork's copy of the task; a goal's fork: null"
    )
    source_goal_id = serializers.UUIDField()
    source_task_id = serializers.UUIDField(allow_null=True)
    at_position = serializers.IntegerField()
    task_ids = serializers.DictField(
        child=serializers.UUIDField(), help_text="source task id → the fork's task id"
    )
    carried_items = serializers.IntegerField(help_text="world items carried, each with its forked_from")
    replayed = serializers.BooleanField(help_text="true when the key had been used: nothing was written")


def _answer(outcome: forks.ForkOutcome) -> Response:
    data = {
        "goal_id": outcome.goal.id,
        "task_id": outcome.task_ids[outcome.source_task_id] if outcome.source_task_id else None,
        "source_goal_id": outcome.source_goal_id,
        "source_task_id": outcome.source_task_id,
        "at_position": outcome.goal.forked_at_position,
        "task_ids": outcome.task_ids,
        "carried_items": outcome.carried_items,
        "replayed": outcome.replayed,
    }
    return Response(
        ForkSerializer(data).data, status=status.HTTP_200_OK if outcome.replayed else status.HTTP_201_CREATED
    )


def _fork(request: Request, service: Callable[..., forks.ForkOutcome], **source: Any) -> forks.ForkOutcome:
    body = ForkRequestSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return service(
        project_id=request.user.project_id,
        at_position=body.validated_data["at_position"],
        reason=body.validated_data["reason"],
        actor=request.user.actor,
        idempotency_key=body.validated_data.get("key") or idempotency_key(request),
        **source,
    )


class TaskForkView(GenericAPIView):  # type: ignore[type-arg]
    """Fork a task as it stood at a past position into a goal of its own."""

    serializer_class = ForkSerializer
    operator_only = {"POST": OperatorOnly("forking a task")}
    error_statuses = {"POST": (422,)}

    @extend_schema(
        request=ForkRequestSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: ForkSerializer, 200: ForkSerializer},
        summary="Fork a task from a past position: a new goal with the task, the steps it refines, and the "
        "world (items, decisions, failures, contract, grants) as they stood",
    )
    def post(self, request: Request, task_id: str) -> Response:
        return _answer(_fork(request, forks.task_fork, task_id=task_id))


class GoalForkView(GenericAPIView):  # type: ignore[type-arg]
    """Fork a goal with its plan as it stood at a past position."""

    serializer_class = ForkSerializer
    operator_only = {"POST": OperatorOnly("forking a goal")}
    error_statuses = {"POST": (422,)}

    @extend_schema(
        request=ForkRequestSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: ForkSerializer, 200: ForkSerializer},
        summary="Fork a goal from a past position: a new goal with its plan (every task pending) and its "
        "world as they stood",
    )
    def post(self, request: Request, goal_id: str) -> Response:
        return _answer(_fork(request, forks.goal_fork, goal_id=goal_id))
