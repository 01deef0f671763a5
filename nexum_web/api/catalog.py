"""The model catalog API (SPEC I1): cards with the budget each word gets now, the catalog document, and the
per-word overlays. Values are validated by the core's value gates (never coerced by DRF fields: ``"8000"`` or
``8000.0`` is refused, not repaired); the serializers below describe the shapes and serialize the output."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from context_app.catalog import selectors, services
from context_app.compilation.selectors.usage import CardDrift, drift_by_card
from nexum.core.catalog.changes import MAX_TOKEN_COUNT
from nexum.core.catalog.overlays import ContextWindowOverlay
from nexum_web.api.auth import OperatorOnly
from nexum_web.api.strict import StrictInput


def _token_count(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_TOKEN_COUNT, help_text=help_text
    )


class OverlaySerializer(StrictInput):
    """An overlay's members; each is optional, null is "whatever the model card says", and an overlay
    declares at least one (the core's value gate checks them:
    ``nexum.core.catalog.changes.decide_overlay_set``)."""

    context_tokens = _token_count("lowers the window")
    auto_compact_tokens = _token_count("compaction trigger window, clamped to the window")
    enabled = serializers.BooleanField(
        required=False, allow_null=True, help_text="compaction default for this word"
    )

    requires_one_of = ("context_tokens", "auto_compact_tokens", "enabled")


@extend_schema_field(OverlaySerializer(allow_null=True))
class OverlayField(serializers.Field):
    """An overlay as its declared members only."""

    def to_representation(self, value: ContextWindowOverlay) -> dict[str, Any]:
        return value.as_dict()


class BudgetSerializer(serializers.Serializer):
    size_class = serializers.CharField()
    context_tokens = serializers.IntegerField()
    tool_count = serializers.IntegerField()
    reasoning = serializers.CharField()
    reserve_output_tokens = serializers.IntegerField()
    window = serializers.IntegerField()
    safety_margin_tokens = serializers.IntegerField(
        help_text="tokens the card's safety margin holds back from the window (0: none)"
    )


class BudgetOverridesSerializer(StrictInput):
    context_tokens = serializers.IntegerField(allow_null=True, required=False)
    tool_count = serializers.IntegerField(allow_null=True, required=False)


class CardSerializer(StrictInput):
    word = serializers.CharField()
    model_id = serializers.CharField()
    tier = serializers.ChoiceField(choices=["local", "cloud"])
    context_window = serializers.IntegerField(allow_null=True, required=False)
    max_output_tokens = serializers.IntegerField(allow_null=True, required=False)
    capabilities = serializers.ListField(child=serializers.CharField(), required=False)
    latency_class = serializers.CharField(allow_null=True, required=False)
    encoding = serializers.CharField(
        required=False,
        help_text="tokenizer encoding: cl100k_base (default) or one in NEXUM_TOKENIZER_ENCODINGS",
    )
    preferred_context_tokens = serializers.IntegerField(allow_null=True, required=False)
    max_tool_count = serializers.IntegerField(allow_null=True, required=False)
    overrides = BudgetOverridesSerializer(required=False)
    safety_margin_tokens = serializers.IntegerField(
        allow_null=True,
        required=False,
        help_text="tokens held back from the window for what Nexum's count misses (chat template, system "
        "prompt, the provider's tokenizer); or safety_margin_percent, not both",
    )
    safety_margin_percent = serializers.IntegerField(
        allow_null=True,
        required=False,
        help_text="percent (0-90) of the window less the output reserve held back; or safety_margin_tokens",
    )


class CatalogDocumentSerializer(StrictInput):
    cards = CardSerializer(many=True)
    aliases = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="word → the word it is another name for"
    )
    tiers = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="tier word → the word whose model it names"
    )


class CatalogSerializer(CatalogDocumentSerializer):
    version = serializers.IntegerField(help_text="version of the project's models stream")


class CatalogChangeSerializer(CatalogSerializer):
    changed = serializers.BooleanField(help_text="false when the catalog was already in force")


class DriftSerializer(serializers.Serializer):
    """Nexum's count against the provider's over the card's latest reports (issue 28; README, Usage)."""

    reports = serializers.IntegerField(help_text="the reports the drift is taken over")
    p50 = serializers.FloatField(help_text="median drift, (provider - nexum) / nexum prompt tokens")
    p95 = serializers.FloatField(help_text="95th percentile drift (nearest rank)")
    nexum_tokens = serializers.IntegerField(help_text="Nexum's prompt tokens summed over those reports")
    provider_tokens = serializers.IntegerField(help_text="the provider's prompt tokens summed")
    threshold = serializers.FloatField(help_text="NEXUM_USAGE_DRIFT_THRESHOLD")
    drifting = serializers.BooleanField(help_text="p95 above the threshold: raise the card's safety margin")


def drift_data(drift: CardDrift) -> dict[str, Any]:
    summary = drift.summary
    return {
        "reports": summary.reports,
        "p50": summary.p50,
        "p95": summary.p95,
        "nexum_tokens": summary.nexum_tokens,
        "provider_tokens": summary.provider_tokens,
        "threshold": drift.threshold,
        "drifting": drift.drifting,
    }


class WordSerializer(serializers.Serializer):
    """A catalog word; ``drift`` reads the card drifts the serializer's context holds (``drifts``)."""

    word = serializers.CharField()
    kind = serializers.ChoiceField(choices=["model", "alias", "tier"])
    target = serializers.CharField(allow_null=True, help_text="the word an alias or tier word names")
    model_word = serializers.CharField(help_text="the model word the word resolves to")
    model_id = serializers.CharField()
    overlay = OverlayField(help_text="the overlay declared on this very word")
    overlay_in_force = OverlayField(help_text="the overlay a call under this word gets now (SPEC O5)")
    window = serializers.IntegerField(allow_null=True, help_text="physical window after the overlay")
    auto_compact_tokens = serializers.IntegerField(allow_null=True)
    compaction_enabled = serializers.BooleanField(help_text="when the request does not say")
    budget = BudgetSerializer(allow_null=True)
    budget_error = serializers.DictField(allow_null=True, help_text="why no budget (no window at all)")
    drift = serializers.SerializerMethodField(
        help_text="the provider's count against Nexum's for the card the word resolves to; null: no usage"
    )

    @extend_schema_field(DriftSerializer(allow_null=True))
    def get_drift(self, word: selectors.WordView) -> dict[str, Any] | None:
        drift = self.context["drifts"].get(word.model_word)
        return None if drift is None else drift_data(drift)


class ModelsSerializer(CatalogSerializer):
    words = WordSerializer(many=True)


class OverlayChangeSerializer(serializers.Serializer):
    changed = serializers.BooleanField(help_text="false when nothing had to be written")
    version = serializers.IntegerField()
    previous = OverlayField(help_text="the overlay declared on the word before")
    model = WordSerializer(help_text="the word as it stands now")


def _require_word(project_id: str, word: str) -> None:
    """A word in the path names a resource: one the project's catalog lacks is 404 ``unknown_model_word``."""
    selectors.word_require(project_id=project_id, word=word, field="word")


def _catalog_data(version: int, document: Any) -> dict[str, Any]:
    return {"version": version, **document.as_data()}


class ModelsView(APIView):
    """The project's model catalog: every word with the overlay in force and the budget it would get now."""

    @extend_schema(responses=ModelsSerializer)
    def get(self, request: Request) -> Response:
        project_id = request.user.project_id
        view = selectors.catalog_view(project_id)
        data = {**_catalog_data(view.version, view.document), "words": view.words}
        drifts = drift_by_card(project_id=project_id)
        return Response(ModelsSerializer(data, context={"drifts": drifts}).data)


class ModelCatalogView(APIView):
    """The catalog document (cards, aliases, tier words); ``PUT`` replaces it as a whole."""

    operator_only = {"PUT": OperatorOnly("replacing the model catalog")}

    @extend_schema(responses=CatalogSerializer)
    def get(self, request: Request) -> Response:
        project_id = request.user.project_id
        data = _catalog_data(
            selectors.catalog_version(project_id), selectors.catalog_document_for(project_id)
        )
        return Response(CatalogSerializer(data).data)

    @extend_schema(request=CatalogDocumentSerializer, responses=CatalogChangeSerializer)
    def put(self, request: Request) -> Response:
        change = services.model_catalog_replace(
            project_id=request.user.project_id,
            catalog=request.data,
            actor=request.user.actor,
            where="PUT /api/v1/models/catalog",
        )
        data = {**_catalog_data(change.version, change.document), "changed": change.changed}
        return Response(CatalogChangeSerializer(data).data)


class ModelOverlayView(APIView):
    """One word's overlay (SPEC O1-O7): ``PUT`` declares it (body: its members), ``DELETE`` clears it."""

    operator_only = {
        "PUT": OperatorOnly("setting a model overlay"),
        "DELETE": OperatorOnly("clearing a model overlay"),
    }

    @extend_schema(request=OverlaySerializer, responses=OverlayChangeSerializer)
    def put(self, request: Request, word: str) -> Response:
        _require_word(request.user.project_id, word)
        change = services.model_overlay_set(
            project_id=request.user.project_id,
            word=word,
            overlay=request.data,
            actor=request.user.actor,
            where=f"PUT /api/v1/models/{word}/overlay",
        )
        return self._respond(request, change)

    @extend_schema(request=None, responses={200: OverlayChangeSerializer})
    def delete(self, request: Request, word: str) -> Response:
        _require_word(request.user.project_id, word)
        change = services.model_overlay_clear(
            project_id=request.user.project_id,
            word=word,
            actor=request.user.actor,
            where=f"DELETE /api/v1/models/{word}/overlay",
        )
        return self._respond(request, change)

    def _respond(self, request: Request, change: services.OverlayChange) -> Response:
        data = {
            "changed": change.changed,
            "version": change.version,
            "previous": change.old,
            "model": selectors.word_view(request.user.project_id, change.word),
        }
        drifts = drift_by_card(project_id=request.user.project_id)
        return Response(OverlayChangeSerializer(data, context={"drifts": drifts}).data)
