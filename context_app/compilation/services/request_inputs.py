"""What a compile request carries, checked before anything is written (the model word, the request id, the
evidence, the focus), and its evidence and focus kept content-addressed (``CompileEvidence``): events carry
their digests, not their texts.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.utils import timezone

from context_app.compilation.models import CompileEvidence
from context_app.compilation.selectors.contexts import evidence_get
from nexum.core.compilation.model import EVIDENCE_KINDS
from nexum.core.digests import digest_of
from nexum.core.errors import ValidationFailed
from nexum.core.ids import COMPILATION_IDS
from nexum.core.text import require_storable
from nexum.core.world.items import DEFAULT_TRUST_CLASS, RECORDABLE_TRUST_CLASSES, SHORT_MAX, TEXT_MAX

EVIDENCE_MAX_ITEMS = 200
EVIDENCE_ID_MAX = 200
FOCUS_MAX_CHARS = 2000


def validate_evidence(evidence: Any) -> list[dict[str, Any]]:
    """Evidence a request supplies, checked and normalized (sorted keys; ids unique)."""
    if evidence is None:
        return []
    if not isinstance(evidence, list | tuple):
        raise ValidationFailed("evidence must be a list", field="evidence")
    if len(evidence) > EVIDENCE_MAX_ITEMS:
        raise ValidationFailed(f"at most {EVIDENCE_MAX_ITEMS} evidence items", field="evidence")
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(evidence):
        where = f"evidence.{index}"
        if not isinstance(entry, Mapping):
            raise ValidationFailed("an evidence item is an object", field=where)
        unknown = sorted(set(entry) - {"kind", "id", "text", "origin", "trust_class"})
        if unknown:
            raise ValidationFailed(f"unknown member {unknown[0]!r}", field=f"{where}.{unknown[0]}")
        kind = entry.get("kind", "code")
        if kind not in EVIDENCE_KINDS:
            raise ValidationFailed(f"kind must be one of {', '.join(EVIDENCE_KINDS)}", field=f"{where}.kind")
        text = _clean_text(entry.get("text"), f"{where}.text", TEXT_MAX, required=True)
        item_id = entry.get("id", str(index + 1))
        item_id = _clean_text(item_id, f"{where}.id", EVIDENCE_ID_MAX, required=True)
        if item_id in seen:
            raise ValidationFailed(f"evidence id {item_id!r} is given twice", field=f"{where}.id")
        seen.add(item_id)
        origin = _clean_text(entry.get("origin", ""), f"{where}.origin", SHORT_MAX, required=False)
        trust_class = entry.get("trust_class", DEFAULT_TRUST_CLASS)
        if trust_class not in RECORDABLE_TRUST_CLASSES:
            raise ValidationFailed(
                f"trust_class must be one of {', '.join(RECORDABLE_TRUST_CLASSES)}",
                field=f"{where}.trust_class",
            )
        checked.append(
            {"id": item_id, "kind": kind, "origin": origin, "text": text, "trust_class": trust_class}
        )
    return checked


def validate_focus(focus: Any) -> str:
    """The request's ``focus``: text of at most ``FOCUS_MAX_CHARS`` characters (absent or ``None``: none)."""
    if focus is None:
        return ""
    return _clean_text(focus, "focus", FOCUS_MAX_CHARS, required=False).strip()


def _clean_text(value: Any, field: str, limit: int, *, required: bool) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    require_storable(value, field)
    if required and not value.strip():
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if len(value) > limit:
        raise ValidationFailed(f"{field} is over {limit} characters", field=field)
    return value


def validate_model_word(word: Any) -> str:
    if not isinstance(word, str) or not word.strip() or len(word) > 100:
        raise ValidationFailed("model must be a catalog word of 1–100 characters", field="model")
    return word


def validate_request_id(request_id: str | None) -> str:
    if request_id is None:
        return str(uuid.uuid4())
    try:
        return str(uuid.UUID(str(request_id)))
    except ValueError:
        raise ValidationFailed("request_id must be a UUID", field="request_id") from None


def request_id_for_key(project_id: str, key: str) -> str:
    """The request id an ``Idempotency-Key`` stands for in a project (a retried request finds its answer)."""
    return str(uuid.uuid5(COMPILATION_IDS, f"{project_id}/compile/{key}"))


def store_evidence(project_id: str, evidence: Sequence[Mapping[str, Any]]) -> str | None:
    if not evidence:
        return None
    return _store_items(project_id, [dict(sorted(entry.items())) for entry in evidence])


def store_focus(project_id: str, focus: str) -> str | None:
    """Keep a request's focus as the request evidence is kept (content-addressed): events carry no text."""
    return _store_items(project_id, [{"focus": focus}]) if focus else None


def focus_text(project_id: str, digest: str | None) -> str:
    """The focus kept under ``digest`` (``store_focus``); ``""`` for none."""
    return evidence_get(project_id=project_id, digest=digest)[0]["focus"] if digest else ""


def _store_items(project_id: str, items: list[dict[str, Any]]) -> str:
    digest = digest_of(items)
    CompileEvidence.objects.bulk_create(
        [
            CompileEvidence(
                id=uuid.uuid5(COMPILATION_IDS, f"{project_id}/evidence/{digest}"),
                project_id=project_id,
                digest=digest,
                items=items,
                stored_at=timezone.now(),
            )
        ],
        ignore_conflicts=True,
    )
    return digest
