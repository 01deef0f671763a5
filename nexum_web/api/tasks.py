"""The task graph's REST endpoints (SPEC I1): goals with their tasks, task state and timeline, transitions.

Views validate the request, call one service or selector, and serialize. Every POST honours an
``Idempotency-Key`` header: a retried request writes nothing twice and answers as the original did.
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from nexum.core.tasks.lifecycle import MAX_TEXT_CHARS, RISKS, TASK_FIELDS, TASK_STATES
from nexum.core.text import MAX_REASON_CHARS
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import ListQuery, keyset_page, page_schema
from nexum_web.api.strict import StrictInput
from nexum_web.api.verification import ContractField
from tasks_app import selectors
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_block, task_cancel, task_fail, task_start, task_unblock

# --- requests ---


TASK_KEY = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class TaskSpecSerializer(StrictInput):
    """One step of a goal's plan (documentation of the ``tasks`` items; validated by the task graph rules)."""

    key = serializers.RegexField(TASK_KEY, trim_whitespace=False, help_text="unique within the goal, e.g. s3")
    objective = serializers.CharField(max_length=MAX_TEXT_CHARS)
    inputs = serializers.ListField(child=serializers.CharField(), required=False)
    constraints = serializers.ListField(child=serializers.CharField(), required=False)
    success_criteria = serializers.ListField(child=serializers.CharField(), required=False)
    risk = serializers.ChoiceField(choices=RISKS, required=False, help_text="default: medium")
    depends_on = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="keys of tasks in this goal"
    )
    parent = serializers.CharField(
        required=False, allow_null=True, help_text="key of the task this one refines; the goal when absent"
    )


assert set(TaskSpecSerializer._declared_fields) == TASK_FIELDS  # the documentation matches the rules


@extend_schema_field(TaskSpecSerializer(many=True))
class TaskSpecListField(serializers.ListField):
    """The plan's steps as JSON objects; their members are checked by
    ``nexum.core.tasks.lifecycle.plan_goal``."""

    child = serializers.DictField()


class GoalCreateSerializer(StrictInput):
    objective = serializers.CharField(max_length=MAX_TEXT_CHARS)
    inputs = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    constraints = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    success_criteria = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    risk = serializers.ChoiceField(
        choices=RISKS,
        required=False,
        help_text="default: the highest risk among the goal's tasks",
        error_messages={"invalid_choice": f"must be one of {', '.join(RISKS)}"},
    )
    tasks = TaskSpecListField(min_length=1)
    contracts = serializers.DictField(
        child=ContractField(),
        required=False,
        help_text="verification contracts by task key (see PUT /tasks/{id}/contract for the shape);"
        " an operator's: an agent token gets 403, and its goal's tasks wait for an operator's contracts",
    )
    contract_origin = serializers.DictField(
        required=False,
        help_text="lowers the contracts' origin (set by the server to repository_authored):"
        " {trust_class?, derived_from?: [world item ids]}; below repository_authored is refused (422)",
    )


class TransitionRequestSerializer(StrictInput):
    expected_version = serializers.IntegerField(
        min_value=0, required=False, help_text="the task version you acted on; 409 if it moved on"
    )
    reason = serializers.CharField(
        max_length=MAX_REASON_CHARS, required=False, allow_blank=True, default="", help_text="why"
    )


class TaskListQuery(ListQuery):
    goal = serializers.UUIDField(required=False, help_text="only this goal's tasks")
    key = serializers.RegexField(
        TASK_KEY, required=False, trim_whitespace=False, help_text="only the tasks with this key"
    )
    state = serializers.ChoiceField(
        choices=TASK_STATES,
        required=False,
        error_messages={"invalid_choice": f"must be one of {', '.join(TASK_STATES)}"},
    )


# --- responses ---


class TaskSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    goal_id = serializers.UUIDField(help_text="the root goal; a goal names itself")
    parent_id = serializers.UUIDField(allow_null=True)
    key = serializers.CharField(help_text="'' for a goal")
    is_goal = serializers.BooleanField()
    objective = serializers.CharField()
    inputs = serializers.ListField(child=serializers.CharField())
    constraints = serializers.ListField(child=serializers.CharField())
    success_criteria = serializers.ListField(child=serializers.CharField())
    risk = serializers.ChoiceField(choices=RISKS)
    depends_on = serializers.ListField(child=serializers.CharField())
    state = serializers.ChoiceField(choices=TASK_STATES)
    attempt = serializers.IntegerField(help_text="how many times the task went running (retries included)")
    version = serializers.IntegerField(help_text="send back as expected_version")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    forked_from = serializers.UUIDField(
        allow_null=True, help_text="the goal or task this one was forked from (POST …/fork); null: none"
    )
    forked_at_position = serializers.IntegerField(
        allow_null=True, help_text="the log position of the source's state the fork started from"
    )


class ForkNodeSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="the fork (a goal, or a task of a fork's goal)")
    goal_id = serializers.UUIDField()
    at_position = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    forks = serializers.ListField(
        child=serializers.DictField(), help_text="the fork's own forks, in this shape"
    )


class TransitionSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="the event's position in the log")
    task_id = serializers.UUIDField()
    event_type = serializers.CharField()
    from_state = serializers.CharField(help_text="'' for the creation")
    to_state = serializers.CharField()
    attempt = serializers.IntegerField()
    version = serializers.IntegerField()
    actor = serializers.CharField()
    reason = serializers.CharField()
    decision_id = serializers.CharField(help_text="the gate decision that caused it, if any")
    recorded_at = serializers.DateTimeField()


def _forks(task: Task) -> list[dict[str, Any]]:
    return ForkNodeSerializer(selectors.fork_tree(task=task), many=True).data  # type: ignore[return-value]


class TaskDetailSerializer(TaskSerializer):
    transitions = serializers.SerializerMethodField()
    forks = serializers.SerializerMethodField()

    @extend_schema_field(ForkNodeSerializer(many=True))
    def get_forks(self, task: Task) -> list[dict[str, Any]]:
        return _forks(task)

    @extend_schema_field(TransitionSerializer(many=True))
    def get_transitions(self, task: Task) -> list[dict[str, Any]]:
        return TransitionSerializer(selectors.task_transitions(task=task), many=True).data  # type: ignore[return-value]


class GoalSerializer(TaskSerializer):
    progress = serializers.DictField(
        child=serializers.IntegerField(), help_text="the goal's tasks counted by state"
    )


class GoalDetailSerializer(GoalSerializer):
    tasks = serializers.SerializerMethodField()
    forks = serializers.SerializerMethodField()

    @extend_schema_field(ForkNodeSerializer(many=True))
    def get_forks(self, goal: Task) -> list[dict[str, Any]]:
        return _forks(goal)

    @extend_schema_field(TaskSerializer(many=True))
    def get_tasks(self, goal: Task) -> list[dict[str, Any]]:
        return TaskSerializer(selectors.goal_tasks(goal=goal), many=True).data  # type: ignore[return-value]


# --- views ---


class GoalListCreateView(GenericAPIView):  # type: ignore[type-arg]
    """Goals of the caller's project (newest first); create a goal with its plan."""

    serializer_class = GoalSerializer
    query_serializers = {"GET": ListQuery}
    error_statuses = {"POST": (422,)}
    operator_only = {
        "POST": OperatorOnly("registering verification contracts", fields=("contracts", "contract_origin"))
    }

    @extend_schema(responses=page_schema("GoalPage", GoalSerializer))
    def get(self, request: Request) -> Response:
        return Response(
            keyset_page(
                selectors.goal_list(project_id=request.user.project_id),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda goals: GoalSerializer(goals, many=True).data,
            )
        )

    @extend_schema(
        request=GoalCreateSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: GoalDetailSerializer},
    )
    def post(self, request: Request) -> Response:
        body = GoalCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        goal = goal_create(
            project_id=request.user.project_id,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
            **body.validated_data,
        )
        return Response(GoalDetailSerializer(goal).data, status=status.HTTP_201_CREATED)


class GoalDetailView(GenericAPIView):  # type: ignore[type-arg]
    """One goal with its tasks in plan order."""

    serializer_class = GoalDetailSerializer

    @extend_schema(responses=GoalDetailSerializer)
    def get(self, request: Request, goal_id: str) -> Response:
        goal = selectors.goal_get(project_id=request.user.project_id, goal_id=goal_id)
        return Response(GoalDetailSerializer(goal).data)


class GoalTaskDetailView(GenericAPIView):  # type: ignore[type-arg]
    """A task addressed by its goal and its key in the goal's plan (as ``GET /tasks/{id}``)."""

    serializer_class = TaskDetailSerializer

    @extend_schema(responses=TaskDetailSerializer)
    def get(self, request: Request, goal_id: str, key: str) -> Response:
        task = selectors.goal_task_get(project_id=request.user.project_id, goal_id=goal_id, key=key)
        return Response(TaskDetailSerializer(task).data)


class TaskListView(GenericAPIView):  # type: ignore[type-arg]
    """The project's tasks (goals excluded), filtered by goal, state and key, paginated."""

    serializer_class = TaskSerializer
    query_serializers = {"GET": TaskListQuery}

    @extend_schema(responses=page_schema("TaskPage", TaskSerializer))
    def get(self, request: Request) -> Response:
        query = request.query
        tasks = selectors.task_list(
            project_id=request.user.project_id,
            goal_id=query.get("goal"),
            state=query.get("state"),
            key=query.get("key"),
        )
        return Response(
            keyset_page(
                tasks,
                limit=query["limit"],
                cursor=query.get("cursor"),
                serialize=lambda rows: TaskSerializer(rows, many=True).data,
            )
        )


class TaskDetailView(GenericAPIView):  # type: ignore[type-arg]
    """A task (or goal) with its state, version, attempt and transition timeline."""

    serializer_class = TaskDetailSerializer

    @extend_schema(responses=TaskDetailSerializer)
    def get(self, request: Request, task_id: str) -> Response:
        task = selectors.task_get(project_id=request.user.project_id, task_id=task_id)
        return Response(TaskDetailSerializer(task).data)


class TaskTransitionView(GenericAPIView):  # type: ignore[type-arg]
    """Move a task along its lifecycle. Illegal transitions and stale ``expected_version`` are 409s."""

    serializer_class = TaskDetailSerializer
    command: ClassVar[str] = ""
    services_by_command: ClassVar[dict[str, Any]] = {
        "start": task_start,
        "fail": task_fail,
        "block": task_block,
        "unblock": task_unblock,
        "cancel": task_cancel,
    }

    def post(self, request: Request, task_id: str) -> Response:
        body = TransitionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        task = self.services_by_command[self.command](
            project_id=request.user.project_id,
            task_id=task_id,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
            **body.validated_data,
        )
        return Response(TaskDetailSerializer(task).data)


def _transition_view(command: str, summary: str, operator_action: str = "") -> type[TaskTransitionView]:
    @extend_schema(
        request=TransitionRequestSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses=TaskDetailSerializer,
        summary=summary,
    )
    def post(self: TaskTransitionView, request: Request, task_id: str) -> Response:
        return TaskTransitionView.post(self, request, task_id)

    operator_only = {"POST": OperatorOnly(operator_action)} if operator_action else {}
    attributes = {"command": command, "__doc__": summary, "post": post, "operator_only": operator_only}
    if command == "start":
        attributes["error_statuses"] = {"POST": (422,)}  # the plan gate (R9)
    return type(f"Task{command.title()}View", (TaskTransitionView,), attributes)


TaskStartView = _transition_view(
    "start", "pending → running once its dependencies are completed; failed → running retries (attempt + 1)"
)
TaskFailView = _transition_view("fail", "running → failed (retryable)")
TaskBlockView = _transition_view("block", "running → blocked (needs a human or an operator)")
# A blocked task needs a human or an operator (SPEC T5), and cancelling gives a task up: operators' calls.
TaskUnblockView = _transition_view("unblock", "blocked → running", operator_action="unblocking a task")
TaskCancelView = _transition_view(
    "cancel", "any non-final state → cancelled", operator_action="cancelling a task"
)


# POST /tasks/{id}/complete lives in nexum_web.api.verification: only the verification gate completes a task.
