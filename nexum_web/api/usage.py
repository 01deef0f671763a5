"""The usage ledger's endpoints (issue 28 item 3): an agent reports what the provider counted for a model call
made with a compiled context (``POST /contexts/{digest}/usage``), and anyone of the project reads the totals
of the project, a goal or a task (``GET /usage``). Drift per card is shown by ``GET /models``.

A POST honours the ``Idempotency-Key`` header: a retry returns the first report and writes nothing.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.compilation.selectors.usage import usage_totals
from context_app.compilation.services.usage import context_usage_report
from nexum.core.catalog.changes import MAX_TOKEN_COUNT
from nexum.core.catalog.usage import COST_MAX, NAME_MAX
from nexum_web.api.idempotency import IDEMPOTENCY_HEADER, idempotency_key
from nexum_web.api.strict import StrictInput, StrictQuery


def _count(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=MAX_TOKEN_COUNT, help_text=help_text)


class UsageInput(StrictInput):
    prompt_tokens = _count("the provider's count of the prompt it was sent")
    completion_tokens = _count("the provider's count of its answer")
    provider = serializers.CharField(max_length=NAME_MAX, help_text="who served the call: openai, vllm …")
    model = serializers.CharField(max_length=NAME_MAX, help_text="the model the provider says answered")
    cost = serializers.FloatField(
        min_value=0,
        max_value=float(COST_MAX),
        required=False,
        allow_null=True,
        help_text="what the call cost, in the provider's currency; kept to 10 decimal places",
    )


class UsageSerializer(serializers.Serializer):
    usage_id = serializers.UUIDField()
    digest = serializers.CharField()
    task_id = serializers.UUIDField()
    goal_id = serializers.UUIDField()
    model_word = serializers.CharField(help_text="the word the context was compiled under")
    card_word = serializers.CharField(help_text="the card that word resolved to: drift is kept per card")
    nexum_tokens = serializers.IntegerField(help_text="Nexum's count: the prompt block plus its tool schemas")
    provider = serializers.CharField()
    model = serializers.CharField(source="provider_model")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cost = serializers.FloatField(allow_null=True, help_text="kept as the decimal reported")
    drift = serializers.FloatField(
        allow_null=True, help_text="(prompt_tokens - nexum_tokens) / nexum_tokens; null when Nexum counted 0"
    )
    position = serializers.IntegerField()
    actor = serializers.CharField()
    recorded_at = serializers.DateTimeField()


class UsageTotalsSerializer(serializers.Serializer):
    reports = serializers.IntegerField()
    nexum_tokens = serializers.IntegerField(help_text="Nexum's prompt tokens summed over the reports")
    prompt_tokens = serializers.IntegerField(help_text="the provider's prompt tokens summed")
    completion_tokens = serializers.IntegerField()
    cost = serializers.FloatField(
        allow_null=True,
        help_text="the sum of the costs reported (summed as decimals); null when none gave one",
    )
    costed_reports = serializers.IntegerField(help_text="how many reports gave a cost")


class CardUsageSerializer(serializers.Serializer):
    card_word = serializers.CharField()
    totals = UsageTotalsSerializer()


class UsageSummarySerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["project", "goal", "task"])
    scope_id = serializers.CharField()
    totals = UsageTotalsSerializer()
    by_card = CardUsageSerializer(many=True)


class UsageQuery(StrictQuery):
    goal = serializers.UUIDField(required=False, help_text="only the usage of this goal's tasks")
    task = serializers.UUIDField(
        required=False, help_text="only the usage of this task (within goal, if given)"
    )


class ContextUsageView(APIView):
    @extend_schema(
        summary="Report the provider's own token counts for a call made with this context",
        description=(
            "Records what the provider reported for one model call made with the compiled context (an "
            "event: the numbers, the digest and ids). Its drift against Nexum's count is shown per card by "
            "`GET /models`; totals by `GET /usage`."
        ),
        request=UsageInput,
        parameters=[IDEMPOTENCY_HEADER],
        responses={201: UsageSerializer},
    )
    def post(self, request: Request, digest: str) -> Response:
        payload = UsageInput(data=request.data)
        payload.is_valid(raise_exception=True)
        report = context_usage_report(
            project_id=request.user.project_id,
            digest=digest,
            **payload.validated_data,
            actor=request.user.actor,
            idempotency_key=idempotency_key(request),
        )
        return Response(UsageSerializer(report).data, status=status.HTTP_201_CREATED)


class UsageTotalsView(APIView):
    query_serializers = {"GET": UsageQuery}

    @extend_schema(
        summary="Usage totals of the project, a goal or a task, and per card",
        responses={200: UsageSummarySerializer},
    )
    def get(self, request: Request) -> Response:
        query = request.query
        goal_id = str(query["goal"]) if "goal" in query else None
        task_id = str(query["task"]) if "task" in query else None
        project_id = request.user.project_id
        totals, by_card = usage_totals(project_id=project_id, task_id=task_id, goal_id=goal_id)
        scope, scope_id = (
            ("task", task_id) if task_id else ("goal", goal_id) if goal_id else ("project", project_id)
        )
        data = {"scope": scope, "scope_id": scope_id, "totals": totals, "by_card": by_card}
        return Response(UsageSummarySerializer(data).data)
