"""The resolver's REST endpoints (SPEC I1): sources, grants, required questions, resolve, bundles and
escalations.

Views validate, call one service or selector, and serialize. Another project's object is a 404.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.resolution import selectors
from context_app.resolution.models import (
    Escalation,
    Grant,
    Resolve,
    ResolveRequest,
    Source,
    TaskContext,
    TaskQuestions,
)
from context_app.resolution.services.escalations import escalation_resolve
from context_app.resolution.services.grants import grant_issue
from context_app.resolution.services.plan_gate import plan_gate_override
from context_app.resolution.services.questions import questions_set
from context_app.resolution.services.resolve_requests import bundle_resolve_request, resolve_request_get
from context_app.resolution.services.resolves import bundle_resolve, default_budget
from context_app.resolution.services.sources import source_register
from nexum.core.errors import NotFound
from nexum.core.resolution import events as resolution_events
from nexum.core.resolution.model import ResolveBudget
from nexum.core.resolution.validation import MAX_QUESTION_CHARS, MAX_QUESTIONS, MAX_SCOPES, SOURCE_NAME
from nexum_web.api.auth import TRUST_CLASS_CHOICES, OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import ListQuery, keyset_page, page_schema
from nexum_web.api.strict import StrictInput
from tasks_app.selectors import goal_get, task_get


class ProvenanceMixin(serializers.Serializer):
    """Where a request's content comes from (R4): refused with 422 ``untrusted_content`` when it derives from
    content below ``repository_authored``."""

    content_trust = serializers.ChoiceField(
        choices=TRUST_CLASS_CHOICES,
        required=False,
        help_text="trust class of the content this request derives from",
    )
    derived_from = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        default=list,
        help_text="digests of bundle items this request derives from (unknown digests count as untrusted)",
    )


# --- requests ---


class SourceCreateSerializer(ProvenanceMixin, StrictInput):
    name = serializers.RegexField(
        SOURCE_NAME.pattern,
        trim_whitespace=False,
        help_text="1–100 letters, digits, '_', '.' or '-', starting with a letter or digit",
    )
    kind = serializers.CharField(
        max_length=64, help_text="folder, docs, tickets_json, http_json, or a plugin"
    )
    config = serializers.DictField(
        help_text="kind-specific options (path, url, scopes, highest_trust, writable_by, ttl_seconds, …);"
        " never a secret"
    )


class GrantCreateSerializer(ProvenanceMixin, StrictInput):
    sources = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField(max_length=500), max_length=MAX_SCOPES),
        allow_empty=False,
        help_text="source name → granted scopes ([] or ['*'] = every scope the source declares)",
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


def _untrimmed(max_length: int, **kwargs: Any) -> serializers.CharField:
    return serializers.CharField(max_length=max_length, trim_whitespace=False, **kwargs)


class QuestionSerializer(StrictInput):
    """A question the task must have answered before it starts, with what it is about (the core trims the
    question)."""

    question = _untrimmed(MAX_QUESTION_CHARS)
    subjects = serializers.ListField(child=_untrimmed(500), min_length=1, required=False)
    subject = _untrimmed(500, required=False, help_text="one subject (subjects wins)")

    requires_one_of = ("subjects", "subject")


class QuestionsSetSerializer(StrictInput):
    questions = serializers.ListField(child=QuestionSerializer(), max_length=MAX_QUESTIONS)
    expected_version = serializers.IntegerField(min_value=0, required=False)


class ResolveRequestSerializer(StrictInput):
    max_items = serializers.IntegerField(min_value=0, max_value=1000, required=False)
    max_tokens = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False)
    sources = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField(max_length=500)),
        required=False,
        help_text="only these sources and scopes (default: every source of the project, all its scopes)",
    )
    query = serializers.CharField(
        required=False, max_length=4000, help_text="default: objective, inputs, questions"
    )
    async_ = serializers.BooleanField(
        required=False,
        default=False,
        help_text="queue it and answer 202; read the result at /tasks/{id}/bundle",
    )

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["async"] = fields.pop("async_")
        return fields


class EscalationResolveSerializer(ProvenanceMixin, StrictInput):
    action = serializers.ChoiceField(choices=resolution_events.RESOLUTION_ACTIONS)
    text = serializers.CharField(required=False, max_length=20000, help_text="supply_fact: the missing fact")
    subject = serializers.CharField(required=False, allow_blank=True, max_length=500)
    chosen = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        default=list,
        help_text="pick_side: digests",
    )
    source = serializers.CharField(required=False, max_length=100, help_text="grant_source: the source name")
    scopes = serializers.ListField(child=serializers.CharField(max_length=500), required=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class PlanGateOverrideSerializer(ProvenanceMixin, StrictInput):
    reason = serializers.CharField(max_length=2000, help_text="why the task may start despite its gaps")


class EscalationListQuery(ListQuery):
    state = serializers.ChoiceField(
        choices=(resolution_events.ESCALATION_OPEN, resolution_events.ESCALATION_RESOLVED), required=False
    )
    task = serializers.UUIDField(required=False)


# --- responses ---


class SourceSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Source
        fields = (
            "id", "name", "kind", "config", "declared_scopes", "highest_trust", "writable_by", "ttl_seconds",
            "track_revision", "actor", "registered_at",
        )  # fmt: skip
        extra_kwargs = {
            "writable_by": {
                "help_text": "who can change the source's content: agent (a path inside the workspace root, "
                "whatever the config says, or declared with config.writable_by) or operator; what the agent "
                "can write yields items at most agent_reported, which never answer a required question"
            }
        }


class GrantSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Grant
        fields = (
            "id", "goal_id", "task_id", "scopes", "expires_at", "reason", "derived_from", "actor",
            "issued_at", "revoked_at", "revoke_reason",
        )  # fmt: skip


class QuestionsSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = TaskQuestions
        fields = ("task_id", "questions", "version", "updated_at")
        extra_kwargs = {"updated_at": {"allow_null": True, "help_text": "null: never set"}}


class EscalationSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Escalation
        fields = (
            "id", "task_id", "goal_id", "resolve_id", "bundle_digest", "kind", "missing", "why", "subjects",
            "sources", "conflict_group", "evidence", "state", "resolution", "resolution_detail",
            "resolution_reason", "resolved_by", "opened_at", "resolved_at",
        )  # fmt: skip


class PlanGateSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    overridden = serializers.BooleanField(help_text="the latest bundle's gaps were overridden by an operator")

    class Meta:
        model = TaskContext
        fields = (
            "task_id", "latest_resolve_id", "latest_bundle_digest", "complete", "stop_reason", "overridden",
            "override_reason", "override_actor", "overridden_at",
        )  # fmt: skip


class BundleSerializer(serializers.Serializer):
    """A bundle (R8): items with origin, trust, staleness and conflict group; left out by budget; denials;
    source errors; conflict groups; question statuses; escalations; stop reason; complete flag; digest."""

    digest = serializers.CharField()
    items = serializers.ListField(child=serializers.DictField())
    left_out_by_budget = serializers.ListField(child=serializers.DictField())
    denials = serializers.ListField(child=serializers.DictField())
    source_errors = serializers.ListField(child=serializers.DictField())
    conflict_groups = serializers.ListField(child=serializers.DictField())
    questions = serializers.ListField(child=serializers.DictField())
    escalations = serializers.ListField(child=serializers.DictField())
    stop_reason = serializers.CharField()
    complete = serializers.BooleanField()
    incomplete_reasons = serializers.ListField(child=serializers.CharField())
    risk = serializers.CharField()
    tokens_used = serializers.IntegerField()


GRANT_PAGE = page_schema("GrantPage", GrantSerializer)


class ResolveSerializer(serializers.Serializer):
    resolve_id = serializers.UUIDField()
    task_id = serializers.UUIDField()
    bundle_digest = serializers.CharField()
    complete = serializers.BooleanField()
    stop_reason = serializers.CharField()
    escalations = EscalationSerializer(many=True)
    bundle = BundleSerializer()


class QueuedResolveSerializer(serializers.Serializer):
    request_id = serializers.CharField()
    task_id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=resolution_events.REQUEST_STATUSES, help_text="queued, then done (with its bundle) or failed"
    )
    resolve_id = serializers.UUIDField(allow_null=True, help_text="the resolve that answered it")
    bundle_digest = serializers.CharField(allow_blank=True, help_text="its bundle: /bundles/{digest}")
    error = serializers.DictField(allow_null=True, help_text="why it failed: code, message, field")
    requested_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    url = serializers.SerializerMethodField(help_text="where the request's state and outcome are read")

    def get_url(self, queued: ResolveRequest) -> str:
        return reverse("v1:resolve-request", args=[queued.request_id])


def _queued_body(queued: ResolveRequest) -> dict[str, Any]:
    return QueuedResolveSerializer(queued).data


def _resolve_body(resolve: Resolve, bundle: dict[str, Any]) -> dict[str, Any]:
    escalations = Escalation.objects.filter(id__in=resolve.escalation_ids).order_by("position")
    return {
        "resolve_id": str(resolve.id),
        "task_id": str(resolve.task_id),
        "bundle_digest": resolve.bundle_digest,
        "complete": resolve.complete,
        "stop_reason": resolve.stop_reason,
        "escalations": EscalationSerializer(escalations, many=True).data,
        "bundle": bundle,
    }


# --- views ---


class SourceListCreateView(APIView):
    """The project's sources (R1); register one."""

    operator_only = {"POST": OperatorOnly("registering a source")}
    query_serializers = {"GET": ListQuery}
    error_statuses = {"POST": (422,)}

    @extend_schema(responses=page_schema("SourcePage", SourceSerializer))
    def get(self, request: Request) -> Response:
        return Response(
            keyset_page(
                selectors.source_list(project_id=request.user.project_id),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda rows: SourceSerializer(rows, many=True).data,
            )
        )

    @extend_schema(request=SourceCreateSerializer, responses={201: SourceSerializer})
    def post(self, request: Request) -> Response:
        body = SourceCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        source = source_register(
            project_id=request.user.project_id, actor=request.user.actor, **body.validated_data
        )
        return Response(SourceSerializer(source).data, status=status.HTTP_201_CREATED)


class _GrantView(APIView):
    scope = "task"
    operator_only = {"POST": OperatorOnly("issuing a grant")}
    query_serializers = {"GET": ListQuery}
    error_statuses = {"POST": (422,)}

    def _scope(self, request: Request, scope_id: str) -> dict[str, str]:
        if self.scope == "goal":
            return {"goal_id": str(goal_get(project_id=request.user.project_id, goal_id=scope_id).id)}
        return {"task_id": str(task_get(project_id=request.user.project_id, task_id=scope_id).id)}

    def get(self, request: Request, scope_id: str) -> Response:
        grants = selectors.grant_list(project_id=request.user.project_id, **self._scope(request, scope_id))
        return Response(
            keyset_page(
                grants,
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda rows: GrantSerializer(rows, many=True).data,
            )
        )

    def post(self, request: Request, scope_id: str) -> Response:
        body = GrantCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        grant = grant_issue(
            project_id=request.user.project_id,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
            **self._scope(request, scope_id),
            **body.validated_data,
        )
        return Response(GrantSerializer(grant).data, status=status.HTTP_201_CREATED)


class GoalGrantView(_GrantView):
    """Grants of a goal (shared by its tasks, R2)."""

    scope = "goal"

    @extend_schema(responses=GRANT_PAGE)
    def get(self, request: Request, scope_id: str) -> Response:
        return super().get(request, scope_id)

    @extend_schema(
        request=GrantCreateSerializer, parameters=[IDEMPOTENCY_HEADER], responses={201: GrantSerializer}
    )
    def post(self, request: Request, scope_id: str) -> Response:
        return super().post(request, scope_id)


class TaskGrantView(_GrantView):
    """Grants of one task (R2)."""

    scope = "task"

    @extend_schema(responses=GRANT_PAGE)
    def get(self, request: Request, scope_id: str) -> Response:
        return super().get(request, scope_id)

    @extend_schema(
        request=GrantCreateSerializer, parameters=[IDEMPOTENCY_HEADER], responses={201: GrantSerializer}
    )
    def post(self, request: Request, scope_id: str) -> Response:
        return super().post(request, scope_id)


class TaskQuestionsView(APIView):
    """The required questions of a task's step (R7): each with the subjects whose items answer it. Setting
    them is an operator's: the plan gate rests on them."""

    operator_only = {"PUT": OperatorOnly("setting a task's required questions")}

    @extend_schema(responses=QuestionsSerializer)
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get(project_id=request.user.project_id, task_id=task_id)
        row = TaskQuestions.objects.filter(task_id=task.id).first()
        if row is None:
            return Response({"task_id": str(task.id), "questions": [], "version": 0, "updated_at": None})
        return Response(QuestionsSerializer(row).data)

    @extend_schema(request=QuestionsSetSerializer, responses=QuestionsSerializer)
    def put(self, request: Request, task_id: str) -> Response:
        body = QuestionsSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = questions_set(
            project_id=request.user.project_id,
            task_id=task_id,
            actor=request.user.actor,
            **body.validated_data,
        )
        return Response(QuestionsSerializer(row).data)


class TaskResolveView(APIView):
    """Resolve the task's context (R2–R8), answered with the bundle; ``async: true`` queues it for a worker
    (202): its state and outcome at ``/resolves/{request_id}`` (``url``), its bundle then at
    ``/tasks/{id}/bundle``. A queued resolve is recorded before it is sent, so a broker that is down only
    delays it (the dispatcher sends it)."""

    @extend_schema(
        request=ResolveRequestSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={200: ResolveSerializer, 202: QueuedResolveSerializer},
    )
    def post(self, request: Request, task_id: str) -> Response:
        body = ResolveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        task = task_get(project_id=request.user.project_id, task_id=task_id)
        request_id = idempotency_key(request) or str(uuid.uuid4())
        custom = {key: data[key] for key in ("sources", "query") if key in data}
        if "max_items" in data or "max_tokens" in data:
            default = default_budget()
            custom["budget"] = ResolveBudget(
                max_items=data.get("max_items", default.max_items),
                max_tokens=data.get("max_tokens", default.max_tokens),
            )
        if data["async"] and not custom:
            queued = bundle_resolve_request(
                project_id=str(request.user.project_id),
                task_id=str(task.id),
                request_id=request_id,
                actor=request.user.actor,
            )
            return Response(_queued_body(queued), status=status.HTTP_202_ACCEPTED)
        # Request-specific options are not ids: such a resolve always runs here, synchronously.
        outcome = bundle_resolve(
            project_id=request.user.project_id,
            task_id=str(task.id),
            actor=request.user.actor,
            request_id=request_id,
            requested=custom.get("sources"),
            query=custom.get("query"),
            budget=custom.get("budget"),
        )
        return Response(_resolve_body(outcome.resolve, outcome.bundle))


class PlanGateOverrideView(APIView):
    """Let a task start despite the open gaps of its latest bundle (R9): recorded as ``PlanGateOverridden``;
    a later resolve that still shows gaps closes the gate again."""

    operator_only = {"POST": OperatorOnly("overriding the plan gate")}
    error_statuses = {"POST": (422,)}

    @extend_schema(request=PlanGateOverrideSerializer, responses=PlanGateSerializer)
    def post(self, request: Request, task_id: str) -> Response:
        body = PlanGateOverrideSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        head = plan_gate_override(
            project_id=request.user.project_id,
            task_id=task_id,
            actor=request.user.actor,
            **body.validated_data,
        )
        return Response(PlanGateSerializer(head).data)


class TaskBundleView(APIView):
    """The task's latest resolve and its bundle."""

    @extend_schema(responses=ResolveSerializer)
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get(project_id=request.user.project_id, task_id=task_id)
        resolve = selectors.resolve_list(project_id=request.user.project_id, task_id=task.id).first()
        if resolve is None:
            raise NotFound(f"task {task.id} has not been resolved", field="task_id")
        return Response(_resolve_body(resolve, selectors.bundle_content(digest=resolve.bundle_digest)))


class BundleDetailView(APIView):
    """A bundle by its digest."""

    @extend_schema(responses=BundleSerializer)
    def get(self, request: Request, digest: str) -> Response:
        return Response(selectors.bundle_get(project_id=request.user.project_id, digest=digest))


class EscalationListView(APIView):
    """The project's escalations (newest first), by state and task."""

    query_serializers = {"GET": EscalationListQuery}

    @extend_schema(responses=page_schema("EscalationPage", EscalationSerializer))
    def get(self, request: Request) -> Response:
        query = request.query
        escalations = selectors.escalation_list(
            project_id=request.user.project_id, state=query.get("state"), task_id=query.get("task")
        )
        return Response(
            keyset_page(
                escalations,
                limit=query["limit"],
                cursor=query.get("cursor"),
                serialize=lambda rows: EscalationSerializer(rows, many=True).data,
            )
        )


class EscalationDetailView(APIView):
    @extend_schema(responses=EscalationSerializer)
    def get(self, request: Request, escalation_id: str) -> Response:
        escalation = selectors.escalation_get(project_id=request.user.project_id, escalation_id=escalation_id)
        return Response(EscalationSerializer(escalation).data)


class EscalationResolveView(APIView):
    """Close a gap: supply the missing fact, pick a side of a conflict, grant a source, or cancel the task."""

    operator_only = {"POST": OperatorOnly("resolving an escalation")}
    error_statuses = {"POST": (422,)}

    @extend_schema(request=EscalationResolveSerializer, responses=EscalationSerializer)
    def post(self, request: Request, escalation_id: str) -> Response:
        body = EscalationResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        escalation = escalation_resolve(
            project_id=request.user.project_id,
            escalation_id=escalation_id,
            actor=request.user.actor,
            **body.validated_data,
        )
        return Response(EscalationSerializer(escalation).data)


class ResolveRequestView(APIView):
    @extend_schema(
        summary="A queued resolve: queued, done (with the resolve and bundle that answered it) or failed",
        responses={200: QueuedResolveSerializer},
    )
    def get(self, request: Request, request_id: str) -> Response:
        queued = resolve_request_get(project_id=str(request.user.project_id), request_id=request_id)
        return Response(_queued_body(queued))
