"""Approvals' REST endpoints (issue 28 item 4): a human's yes before a risky step.

- ``GET /approvals`` (``?state=``, ``?task=``) and ``GET /approvals/{id}``: any token of the project; an
  agent waits for an answer by reading one (or by the event stream: each request and decision is an event).
- ``POST /approvals/{id}/decision`` ``{decision: grant|deny, reason}``: an operator's (an agent token is
  403 ``forbidden``); a decided approval is 409 ``approval_decided``.
- ``POST /tasks/{id}/approvals`` ``{action, arguments_digest?, reason}``: an agent asks before one action of
  its own, or asks again for the gate's ``start`` / ``complete`` after a denial.
- ``GET|PUT /project/approval-settings`` ``{high_risk_approval}``: the stage high-risk tasks whose contract
  says nothing wait at (PUT: an operator's, an event).

A task whose start or completion needs an approval answers 409 ``approval_required`` (``details.approval_id``)
while it is pending and 409 ``approval_denied`` (``details.reason``) once denied: see
``verification_app.services.approvals.approval_gate``.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nexum.core.text import MAX_REASON_CHARS
from nexum.core.verification.approvals import APPROVAL_STATES, DECISIONS, STAGES
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import ListQuery, keyset_page, page_schema
from nexum_web.api.strict import StrictInput
from tasks_app.selectors import project_get
from tasks_app.services.projects import project_high_risk_approval_set
from verification_app import selectors
from verification_app.models import Approval
from verification_app.services.approvals import approval_decide, approval_request

# --- requests ---


class ApprovalRequestInput(StrictInput):
    action = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$",
        help_text="what to approve: start or complete (the gate's, after a denial) or an action of your own "
        "(deploy)",
    )
    arguments_digest = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        help_text="sha256 of the action's arguments (not for start/complete)",
    )
    reason = serializers.CharField(max_length=MAX_REASON_CHARS, help_text="why the action is needed")


class ApprovalDecisionInput(StrictInput):
    decision = serializers.ChoiceField(choices=DECISIONS)
    reason = serializers.CharField(max_length=MAX_REASON_CHARS, help_text="why yes, or why no")


class ApprovalListQuery(ListQuery):
    state = serializers.ChoiceField(choices=APPROVAL_STATES, required=False)
    task = serializers.UUIDField(required=False)


class ApprovalSettingsInput(StrictInput):
    high_risk_approval = serializers.ChoiceField(
        choices=STAGES,
        allow_null=True,
        help_text="the stage a high-risk task whose contract says nothing waits at; null: none",
    )


# --- responses ---


class ApprovalSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    task_id = serializers.UUIDField()
    goal_id = serializers.UUIDField()

    class Meta:
        model = Approval
        fields = (
            "id",
            "task_id",
            "goal_id",
            "action",
            "arguments_digest",
            "attempt",
            "stage",
            "reason",
            "state",
            "decision_reason",
            "requested_by",
            "decided_by",
            "requested_at",
            "decided_at",
        )


APPROVAL_SETTINGS = inline_serializer(
    "ApprovalSettings",
    {
        "high_risk_approval": serializers.CharField(
            allow_null=True, help_text="before_start, before_complete, or null: no approval by default"
        ),
        "version": serializers.IntegerField(help_text="the project's stream version"),
    },
)


# --- views ---


class ApprovalListView(APIView):
    """The project's approvals (newest first), by state and task."""

    query_serializers = {"GET": ApprovalListQuery}

    @extend_schema(responses=page_schema("ApprovalPage", ApprovalSerializer))
    def get(self, request: Request) -> Response:
        query = request.query
        approvals = selectors.approval_list(
            project_id=request.user.project_id, state=query.get("state"), task_id=query.get("task")
        )
        return Response(
            keyset_page(
                approvals,
                limit=query["limit"],
                cursor=query.get("cursor"),
                serialize=lambda rows: ApprovalSerializer(rows, many=True).data,
            )
        )


class ApprovalDetailView(APIView):
    """One approval: pending, granted or denied, with the operator's reason."""

    @extend_schema(responses=ApprovalSerializer)
    def get(self, request: Request, approval_id: str) -> Response:
        approval = selectors.approval_get(project_id=request.user.project_id, approval_id=approval_id)
        return Response(ApprovalSerializer(approval).data)


class ApprovalDecisionView(APIView):
    """Grant or deny a pending approval, with a reason."""

    operator_only = {"POST": OperatorOnly("deciding an approval")}

    @extend_schema(request=ApprovalDecisionInput, responses=ApprovalSerializer)
    def post(self, request: Request, approval_id: str) -> Response:
        body = ApprovalDecisionInput(data=request.data)
        body.is_valid(raise_exception=True)
        approval = approval_decide(
            project_id=request.user.project_id,
            approval_id=approval_id,
            actor=request.user.actor,
            **body.validated_data,
        )
        return Response(ApprovalSerializer(approval).data)


class TaskApprovalRequestView(APIView):
    """Ask an operator to approve an action on the task's current attempt; read the answer with
    ``GET /approvals/{id}`` or on the event stream (``ApprovalGranted`` / ``ApprovalDenied``)."""

    @extend_schema(
        request=ApprovalRequestInput, parameters=[IDEMPOTENCY_HEADER], responses={201: ApprovalSerializer}
    )
    def post(self, request: Request, task_id: str) -> Response:
        body = ApprovalRequestInput(data=request.data)
        body.is_valid(raise_exception=True)
        approval = approval_request(
            project_id=request.user.project_id,
            task_id=task_id,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
            **body.validated_data,
        )
        return Response(ApprovalSerializer(approval).data, status=status.HTTP_201_CREATED)


class ProjectApprovalSettingsView(APIView):
    """The project's default for high-risk tasks: the stage at which they wait for an operator's approval
    when their contract says nothing. ``PUT`` (operator) sets it, as an event."""

    operator_only = {"PUT": OperatorOnly("setting the project's approval default")}

    @extend_schema(responses=APPROVAL_SETTINGS)
    def get(self, request: Request) -> Response:
        return self._answer(request.user.project_id)

    @extend_schema(request=ApprovalSettingsInput, responses=APPROVAL_SETTINGS)
    def put(self, request: Request) -> Response:
        payload = ApprovalSettingsInput(data=request.data)
        payload.is_valid(raise_exception=True)
        project_high_risk_approval_set(
            project_id=request.user.project_id,
            high_risk_approval=payload.validated_data["high_risk_approval"],
            actor=request.user.actor,
        )
        return self._answer(request.user.project_id)

    def _answer(self, project_id: str) -> Response:
        project = project_get(project_id=project_id)
        return Response({"high_risk_approval": project.high_risk_approval, "version": project.version})
