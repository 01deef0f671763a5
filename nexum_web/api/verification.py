"""The verification gate's REST endpoints (SPEC I1, V1–V8).

- ``POST /tasks/{id}/complete``: the model's answer → the gate's decision (200), or with a real broker the
  recorded request to poll (202, ``Location``: ``/api/v1/completions/{request_id}``). A task that is not
  running answers 200 ``skipped`` and nothing is written. A second request while one is pending for the same
  task version is 409 ``completion_pending`` (``details.request_id`` names the request to poll).
- ``GET /completions/{request_id}``: a request with its decision, the model's answer and every check run.
- ``GET /tasks/{id}/completions``: the task's requests, newest first.
- ``GET|PUT /tasks/{id}/contract``: the task's contract; PUT registers or replaces it (422 when it derives
  from untrusted content, names a denied executable or leaves the project's workspace folder; 400 for a
  pattern RE2 cannot run in linear time).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from context_app.compilation import retention
from context_app.world.artifacts import stored_text
from nexum.core.compilation.retention import CHECK_OUTPUT
from nexum.core.errors import NotFound
from nexum.core.verification.approvals import CONTRACT_APPROVALS
from nexum.core.verification.checks.registry import check_kinds
from nexum.core.verification.contracts import MAX_ANSWER_CHARS, MAX_DERIVED_FROM
from nexum.core.verification.gate import MAX_CHECKS, ON_FAILURE_CHOICES
from nexum_web.api.auth import TRUST_CLASS_CHOICES, OperatorOnly
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.pagination import ListQuery, keyset_page, page_schema
from nexum_web.api.strict import StrictInput
from verification_app import selectors
from verification_app.models import CheckRun, CompletionRequest, Contract
from verification_app.services.completions import completion_request
from verification_app.services.contracts import contract_register

# --- the schema of a contract (validated by nexum.core.verification.gate.contract_from_dict) ---


def check_component(kind: str) -> str:
    """The schema component of one check kind: its class's name (``command`` → ``CommandCheck``)."""
    return check_kinds()[kind].__name__


def _check_schema(kind: str) -> dict[str, Any]:
    """One kind's members as the kind declares them (``CheckSpec.member_schemas``)."""
    cls = check_kinds()[kind]
    required, _ = cls.members()
    return {
        "type": "object",
        "properties": {"kind": {"type": "string", "enum": [kind]}, **cls.member_schemas()},
        "required": ["kind", *required],
        "additionalProperties": False,
    }


def _any_check(auto_schema: Any) -> dict[str, Any]:
    """One check of any kind: a union of one component per kind, told apart by ``kind`` (its discriminator),
    each component registered once."""
    refs = {}
    for kind in check_kinds():
        component = ResolvedComponent(
            check_component(kind), ResolvedComponent.SCHEMA, object=check_component(kind)
        )
        component.schema = _check_schema(kind)
        auto_schema.registry.register_on_missing(component)
        refs[kind] = component.ref
    return {
        "oneOf": list(refs.values()),
        "discriminator": {
            "propertyName": "kind",
            "mapping": {kind: ref["$ref"] for kind, ref in refs.items()},
        },
    }


class ContractField(serializers.DictField):
    """A contract as a JSON object; its members are checked by the gate's rules (400 naming the member)."""


class CheckListField(serializers.ListField):
    """A contract's checks as stored, each in the shape it was registered in (every member given)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.DictField(), **kwargs)


class ContractFieldSchema(OpenApiSerializerFieldExtension):
    """A contract in a request body: the ``ContractSpec`` component, its checks one component per kind."""

    target_class = ContractField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        component = ResolvedComponent("ContractSpec", ResolvedComponent.SCHEMA, object="ContractSpec")
        component.schema = {
            "type": "object",
            "properties": {
                "checks": {
                    "type": "array",
                    "items": _any_check(auto_schema),
                    "maxItems": MAX_CHECKS,
                    "description": "each name unique within the contract",
                },
                "require_checks": {"type": "boolean", "description": "default true (V3)"},
                "on_failure": {
                    "type": "string",
                    "enum": list(ON_FAILURE_CHOICES),
                    "description": "default failed",
                },
                "approval": {
                    "type": "string",
                    "enum": list(CONTRACT_APPROVALS),
                    "description": "before_start or before_complete: that command waits for an operator's "
                    "approval; none: not even when the project's default for high-risk tasks says so; "
                    "absent: that default",
                },
            },
            "additionalProperties": False,
        }
        auto_schema.registry.register_on_missing(component)
        return component.ref


class CheckListFieldSchema(OpenApiSerializerFieldExtension):
    """A contract's checks in an answer: the same component per kind as a request's."""

    target_class = CheckListField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "array", "items": _any_check(auto_schema)}


# --- requests ---


class CompleteRequestSerializer(StrictInput):
    answer = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=MAX_ANSWER_CHARS,
        trim_whitespace=False,
        help_text="the model's answer: recorded with the decision, never deciding it",
    )
    expected_version = serializers.IntegerField(
        min_value=0, required=False, help_text="the task version you acted on; 409 if it moved on"
    )


class ContractRegisterSerializer(StrictInput):
    contract = ContractField()
    trust_class = serializers.ChoiceField(
        choices=TRUST_CLASS_CHOICES,
        required=False,
        help_text="lowers the contract's origin, which the server sets to the operator's ceiling"
        " (repository_authored); above it is 403, below repository_authored is refused (422)",
    )
    derived_from = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        max_length=MAX_DERIVED_FROM,
        help_text="ids of world items the contract derives from; the lowest trust decides",
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    expected_revision = serializers.IntegerField(
        min_value=0, required=False, help_text="the contract revision you replace; 409 if it moved on"
    )


# --- responses ---


class CheckRunSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    ordinal = serializers.IntegerField()
    passed = serializers.BooleanField()
    reason = serializers.CharField(
        help_text="passed, exit_nonzero, timeout, missing_executable, denied_executable, crashed, raised, "
        "workspace_violation, no_match, missing_file, returned_false, sandbox_unavailable"
    )
    exit_code = serializers.IntegerField(allow_null=True)
    duration_ms = serializers.IntegerField()
    argv = serializers.ListField(child=serializers.CharField())
    cwd = serializers.CharField()
    output = serializers.SerializerMethodField(
        help_text="captured output (head and tail when truncated); once retention pruned it, a line saying "
        "when"
    )
    output_sha256 = serializers.CharField()
    output_bytes = serializers.IntegerField()
    truncated = serializers.BooleanField()
    recorded_at = serializers.DateTimeField()

    def get_output(self, run: CheckRun) -> str:
        text = stored_text(run.output_sha256)
        if text or not run.output_sha256:
            return text
        when = retention.pruned_at(
            project_id=str(run.project_id), kind=CHECK_OUTPUT, digest=run.output_sha256
        )
        return "" if when is None else f"[check output pruned by retention at {when.isoformat()}]"


class CompletionSerializer(serializers.Serializer):
    request_id = serializers.UUIDField(source="id")
    task_id = serializers.UUIDField()
    status = serializers.SerializerMethodField(help_text="pending or decided")
    outcome = serializers.SerializerMethodField(help_text="completed, failed, blocked, skipped or pending")
    reason = serializers.CharField()
    failing_checks = serializers.ListField(child=serializers.CharField())
    answer = serializers.SerializerMethodField(help_text="the model's answer, as recorded")
    task_version = serializers.IntegerField(help_text="the task version the request was made at")
    attempt = serializers.IntegerField()
    contract_revision = serializers.IntegerField(help_text="0: no contract was registered")
    actor = serializers.CharField()
    requested_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    check_runs = serializers.SerializerMethodField()

    def get_status(self, request: CompletionRequest) -> str:
        return "decided" if request.decided else "pending"

    def get_outcome(self, request: CompletionRequest) -> str:
        return request.outcome if request.decided else "pending"

    def get_answer(self, request: CompletionRequest) -> str:
        return stored_text(request.answer_sha256)

    @extend_schema_field(CheckRunSerializer(many=True))
    def get_check_runs(self, request: CompletionRequest) -> list[dict[str, Any]]:
        return CheckRunSerializer(selectors.request_check_runs(request=request), many=True).data  # type: ignore[return-value]


class TaskBriefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    state = serializers.CharField()
    version = serializers.IntegerField()
    attempt = serializers.IntegerField()


class CompletionResultSerializer(serializers.Serializer):
    outcome = serializers.CharField(help_text="completed, failed, blocked, skipped, or pending (poll)")
    reason = serializers.CharField()
    task = TaskBriefSerializer()
    completion = CompletionSerializer(allow_null=True, help_text="null when skipped (nothing recorded)")
    poll = serializers.CharField(allow_null=True, help_text="where to poll a pending request")


class ContractSerializer(serializers.Serializer):
    task_id = serializers.UUIDField()
    revision = serializers.IntegerField(help_text="send back as expected_revision")
    checks = CheckListField()
    require_checks = serializers.BooleanField()
    on_failure = serializers.CharField()
    approval = serializers.CharField(
        allow_null=True, help_text="before_start, before_complete or none; null: the project's default"
    )
    trust_class = serializers.CharField()
    derived_from = serializers.ListField(child=serializers.CharField())
    reason = serializers.CharField()
    actor = serializers.CharField()
    registered_at = serializers.DateTimeField()


# --- views ---


def _poll_path(request_id: object) -> str:
    return f"/api/v1/completions/{request_id}"


class TaskCompleteView(GenericAPIView):  # type: ignore[type-arg]
    """Ask the verification gate to complete a running task. Deterministic checks decide (SPEC V2–V7)."""

    serializer_class = CompletionResultSerializer

    @extend_schema(
        request=CompleteRequestSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={200: CompletionResultSerializer, 202: CompletionResultSerializer},
    )
    def post(self, request: Request, task_id: str) -> Response:
        body = CompleteRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = completion_request(
            project_id=request.user.project_id,
            task_id=task_id,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
            **body.validated_data,
        )
        pending = result.outcome == "pending"
        poll = _poll_path(result.request.id) if result.request is not None else None
        data = CompletionResultSerializer(
            {
                "outcome": result.outcome,
                "reason": result.reason,
                "task": result.task,
                "completion": result.request,
                "poll": poll if pending else None,
            }
        ).data
        if pending:
            return Response(data, status=status.HTTP_202_ACCEPTED, headers={"Location": poll})
        return Response(data)


class CompletionDetailView(GenericAPIView):  # type: ignore[type-arg]
    """A completion request: its decision, the model's answer beside every check run and its output."""

    serializer_class = CompletionSerializer

    @extend_schema(responses=CompletionSerializer)
    def get(self, request: Request, request_id: str) -> Response:
        completion = selectors.completion_get(project_id=request.user.project_id, request_id=request_id)
        return Response(CompletionSerializer(completion).data)


class TaskCompletionListView(GenericAPIView):  # type: ignore[type-arg]
    """A task's completion requests and gate decisions, newest first."""

    serializer_class = CompletionSerializer
    query_serializers = {"GET": ListQuery}

    @extend_schema(responses=page_schema("CompletionPage", CompletionSerializer))
    def get(self, request: Request, task_id: str) -> Response:
        return Response(
            keyset_page(
                selectors.task_completions(project_id=request.user.project_id, task_id=task_id),
                limit=request.query["limit"],
                cursor=request.query.get("cursor"),
                serialize=lambda rows: CompletionSerializer(rows, many=True).data,
            )
        )


class TaskContractView(GenericAPIView):  # type: ignore[type-arg]
    """A task's verification contract: read it, or register/replace it (an operator's write, never from
    untrusted content)."""

    serializer_class = ContractSerializer
    operator_only = {"PUT": OperatorOnly("registering or replacing a verification contract")}
    error_statuses = {"PUT": (422,)}

    @extend_schema(responses={200: ContractSerializer})
    def get(self, request: Request, task_id: str) -> Response:
        contract = selectors.contract_get(project_id=request.user.project_id, task_id=task_id)
        if contract is None:
            raise NotFound("no contract is registered for this task", field="contract")
        return Response(_contract_data(contract))

    @extend_schema(
        request=ContractRegisterSerializer, parameters=[IDEMPOTENCY_HEADER], responses=ContractSerializer
    )
    def put(self, request: Request, task_id: str) -> Response:
        body = ContractRegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        contract = contract_register(
            project_id=request.user.project_id,
            task_id=task_id,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
            **body.validated_data,
        )
        return Response(_contract_data(contract))


def _contract_data(contract: Contract) -> dict[str, Any]:
    return ContractSerializer(contract).data  # type: ignore[return-value]
