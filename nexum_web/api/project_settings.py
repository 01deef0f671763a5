"""The project's settings endpoints: its compile settings (the relevance floor) and its retention policy.
``GET`` reads them; ``PUT`` (operator) changes them, as an event on the project's stream.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.compilation import retention
from context_app.compilation.services.compile_settings import relevance_floor
from nexum.core.compilation.retention import POLICY_FIELDS, RETENTION_DAYS_MAX
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.strict import StrictInput
from tasks_app.selectors import project_get
from tasks_app.services.projects import project_relevance_floor_set, project_retention, project_retention_set

# --- the project's compile settings -----------------------------------------------------------------------


class CompileSettingsInput(StrictInput):
    relevance_floor = serializers.FloatField(
        allow_null=True,
        min_value=0.0,
        max_value=1.0,
        help_text="a number from 0 to 1 (0: no floor); null: the service's NEXUM_RELEVANCE_FLOOR",
    )


COMPILE_SETTINGS = inline_serializer(
    "CompileSettings",
    {
        "relevance_floor": serializers.FloatField(
            allow_null=True, help_text="the project's own floor; null: none set"
        ),
        "effective_relevance_floor": serializers.FloatField(
            help_text="the floor the project's compiles apply now (its own, else NEXUM_RELEVANCE_FLOOR)"
        ),
        "version": serializers.IntegerField(help_text="the project's stream version"),
    },
)


class ProjectCompileSettingsView(APIView):
    """The project's compile settings: its relevance floor (issue 24 item 3). ``PUT`` (operator) sets it, as
    an event; each compile records the floor it applied."""

    operator_only = {"PUT": OperatorOnly("setting the project's relevance floor")}

    @extend_schema(responses=COMPILE_SETTINGS)
    def get(self, request: Request) -> Response:
        return self._answer(request.user.project_id)

    @extend_schema(request=CompileSettingsInput, responses=COMPILE_SETTINGS)
    def put(self, request: Request) -> Response:
        payload = CompileSettingsInput(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        project_relevance_floor_set(
            project_id=request.user.project_id,
            relevance_floor=request.data.get("relevance_floor"),
            actor=request.user.actor,
        )
        return self._answer(request.user.project_id)

    def _answer(self, project_id: str) -> Response:
        project = project_get(project_id=project_id)
        return Response(
            {
                "relevance_floor": project.relevance_floor,
                "effective_relevance_floor": relevance_floor(project_id),
                "version": project.version,
            }
        )


# --- the project's retention policy -----------------------------------------------------------------------


def _days_input(what: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        allow_null=True,
        min_value=1,
        max_value=RETENTION_DAYS_MAX,
        help_text=f"days to keep {what} (1 to {RETENTION_DAYS_MAX}); null: the service's default",
    )


class RetentionInput(StrictInput):
    context_days = _days_input("stored compiled contexts")
    bundle_days = _days_input("bundles")
    check_output_days = _days_input("check output")


def _days_output(setting: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        allow_null=True, help_text=f"null: {setting} (unset there: kept for ever)"
    )


RETENTION = inline_serializer(
    "Retention",
    {
        "policy": inline_serializer(
            "RetentionPolicy",
            {
                "context_days": _days_output("NEXUM_RETENTION_CONTEXT_DAYS"),
                "bundle_days": _days_output("NEXUM_RETENTION_BUNDLE_DAYS"),
                "check_output_days": _days_output("NEXUM_RETENTION_CHECK_OUTPUT_DAYS"),
            },
            help_text="the project's own policy",
        ),
        "effective": inline_serializer(
            "RetentionEffective",
            {
                "contexts": serializers.IntegerField(allow_null=True),
                "bundles": serializers.IntegerField(allow_null=True),
                "check_output": serializers.IntegerField(allow_null=True),
            },
            help_text="days each kind is kept now (its own, else the service's); null: for ever",
        ),
        "pruned": inline_serializer(
            "RetentionPruned",
            {
                "contexts": serializers.IntegerField(),
                "bundles": serializers.IntegerField(),
                "check_output": serializers.IntegerField(),
                "bytes_freed": serializers.IntegerField(),
            },
            help_text="what retention has pruned in the project so far",
        ),
        "version": serializers.IntegerField(help_text="the project's stream version"),
    },
)


class ProjectRetentionView(APIView):
    """The project's retention policy (issue 27 item 4): days to keep stored compiled contexts, bundles and
    check output before they are pruned to their digests. ``PUT`` (operator) replaces it, as an event."""

    operator_only = {"PUT": OperatorOnly("setting the project's retention policy")}

    @extend_schema(responses=RETENTION)
    def get(self, request: Request) -> Response:
        return self._answer(request.user.project_id)

    @extend_schema(request=RetentionInput, responses=RETENTION)
    def put(self, request: Request) -> Response:
        payload = RetentionInput(data=request.data, context={"request": request})
        payload.is_valid(raise_exception=True)
        project_retention_set(
            project_id=request.user.project_id,
            policy={field: request.data.get(field) for field in POLICY_FIELDS.values()},
            actor=request.user.actor,
        )
        return self._answer(request.user.project_id)

    def _answer(self, project_id: str) -> Response:
        project = project_get(project_id=project_id)
        pruned = retention.pruned_totals(project_id=project_id)
        return Response(
            {
                "policy": project_retention(project),
                "effective": retention.effective_policy(project),
                "pruned": pruned,
                "version": project.version,
            }
        )
