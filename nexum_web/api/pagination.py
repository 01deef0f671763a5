"""One list shape for every list endpoint: ``{"results": [...], "next_cursor": "<string>" | null}``, paged
by the query parameters ``limit`` and ``cursor``. A caller follows ``next_cursor`` until it is null.

Two kinds of cursor, both strings to the caller:
- a log-ordered list (the event feed, items, a task's compile history) pages by log position: the cursor is
  the position of the last row seen and the next page starts after it, so a subscriber tails the event feed
  with ``?cursor=<last position seen>`` (``log_page``);
- any other list pages by its own order: the cursor is opaque (the ordering values of the last row seen,
  base64url JSON), and the next page starts after that row even when rows were added since (``keyset_page``).
An opaque cursor names a place in one list, as an id names an object: one that this list did not give is
404 ``not_found`` naming ``cursor`` (no such page), never the first page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, Q, QuerySet
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from nexum.core.errors import NotFound
from nexum.core.text import is_storable
from nexum.eventstore import reading, replica
from nexum_web.api.strict import StrictQuery

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
CURSOR_MAX_CHARS = 1000
MAX_POSITION = 2**63 - 1


class ListQuery(StrictQuery):
    """``limit`` and an opaque ``cursor``: the parameters of every list; a list's filters extend it."""

    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT, help_text=f"at most {MAX_LIMIT}"
    )
    cursor = serializers.CharField(
        required=False,
        max_length=CURSOR_MAX_CHARS,
        trim_whitespace=False,  # a cursor is taken as given: one this list did not give is 404
        help_text="the next_cursor of the previous page",
    )


class LogListQuery(ListQuery):
    """A log-ordered list: the cursor is a log position (the rows after it come next)."""

    cursor = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_POSITION,
        help_text="a log position: the rows after it (the next_cursor of the previous page)",
    )


def page_schema(name: str, item: type[serializers.BaseSerializer]) -> serializers.Serializer:
    """The schema of a list endpoint's answer: ``results`` of ``item`` and ``next_cursor``."""
    return inline_serializer(
        name,
        {
            "results": item(many=True),
            "next_cursor": serializers.CharField(
                allow_null=True, help_text="pass as ?cursor= for the next page; null on the last page"
            ),
        },
    )


def page(results: list[Any], next_cursor: str | None) -> dict[str, Any]:
    return {"results": results, "next_cursor": next_cursor}


def log_page(
    fetch: Callable[[int, int], Sequence[Any]],
    *,
    limit: int,
    cursor: int | None,
    serialize: Callable[[Sequence[Any]], list[Any]],
    position: Callable[[Any], int] = lambda row: row.position,
) -> dict[str, Any]:
    """A page of a log-ordered list: ``fetch(after, count)`` returns up to ``count`` rows after a position."""
    rows = fetch(cursor or 0, limit + 1)
    shown = rows[:limit]
    more = len(rows) > limit
    return page(serialize(shown), str(position(shown[-1])) if more else None)


def validate_project_cursor(project_id: str, after: int, *, field: str) -> None:
    """Refuse a cursor past the project's last event: no answer of this project gave it. Positions are
    counted per project since issue 26, so a cursor kept from before is a whole-log position, usually past
    the project's head; it is 404 ``not_found`` naming ``field`` with how to go on, never a silent skip.
    The head is the primary's: a replica behind it answers such a cursor with no events yet, not a 404."""
    with replica.reading_from(replica.PRIMARY):
        head = reading.project_head(project_id)[1]
    if after > head:
        raise NotFound(
            f"position {after} is past this project's last event ({head}): positions are counted per project;"
            " a cursor kept from before that is a log-wide position, so start again from 0 (or from the"
            " position of the last event you handled, as the feed shows it now)",
            field=field,
        )


def keyset_page(
    queryset: QuerySet[Any],
    *,
    limit: int,
    cursor: str | None,
    serialize: Callable[[Sequence[Any]], list[Any]],
) -> dict[str, Any]:
    """A page of ``queryset`` in its order (which must end in a unique field): the rows after ``cursor``."""
    ordering = [(name.lstrip("-"), name.startswith("-")) for name in queryset.query.order_by]
    if not ordering:
        raise ValueError("keyset_page needs an ordered queryset")
    if cursor is not None:
        values = _decode(queryset.model, ordering, cursor)
        queryset = queryset.filter(_after(ordering, values))
    rows = list(queryset[: limit + 1])
    shown = rows[:limit]
    more = len(rows) > limit
    return page(
        serialize(shown), _encode([getattr(shown[-1], name) for name, _ in ordering]) if more else None
    )


def _after(ordering: list[tuple[str, bool]], values: list[Any]) -> Q:
    """Rows strictly after ``values`` in ``ordering``: the first differing field decides."""
    alternatives = []
    for index, (name, descending) in enumerate(ordering):
        equal = {field: value for (field, _), value in zip(ordering[:index], values, strict=False)}
        beyond = {f"{name}__{'lt' if descending else 'gt'}": values[index]}
        alternatives.append(Q(**equal, **beyond))
    return reduce(lambda left, right: left | right, alternatives)


def _encode(values: list[Any]) -> str:
    text = json.dumps([value if isinstance(value, int | float) else str(value) for value in values])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(model: type[Model], ordering: list[tuple[str, bool]], cursor: str) -> list[Any]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(raw, list) or len(raw) != len(ordering) or not all(map(_storable, raw)):
            raise ValueError(cursor)
        return [_field(model, name).to_python(value) for (name, _), value in zip(ordering, raw, strict=True)]
    except (ValueError, TypeError, binascii.Error, DjangoValidationError, FieldDoesNotExist):
        raise NotFound("no such page: not a cursor this list gave", field="cursor") from None


def _storable(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_POSITION
    return isinstance(value, str) and len(value) <= CURSOR_MAX_CHARS and is_storable(value)


def _field(model: type[Model], name: str) -> Any:
    field = model._meta.get_field(name)
    return getattr(field, "target_field", field) if field.is_relation else field
