"""One strict input base for every request body and one for every query string.

A body (``StrictInput``) is taken as JSON says it, never repaired:
- a member the serializer does not declare is 400 ``unknown_field`` naming it (dotted, at any depth);
- a member of the wrong JSON type is 400 ``invalid`` naming it: ``"objective": 123`` is not the string "123"
  and ``"verified": "yes"`` is not ``true`` (DRF's fields would coerce both);
- two members declared ``exclusive`` are refused together (400 ``invalid`` naming the second);
- a body with members declared ``requires_one_of`` must give one of them, not null (400 ``invalid`` naming
  the first);
- a text member that may not be blank must hold a character that is not whitespace (Python's, which is what
  the domain trims: the schema's ``pattern`` is ``NOT_BLANK``, the same set spelled out); one that may be
  blank says so in the schema (no ``minLength``); no string may hold NUL or an unpaired surrogate (no
  database stores them).
The schema says the same: every ``StrictInput`` is ``additionalProperties: false`` (``nexum_web.api.schema``).

A query string (``StrictQuery``) is what a view declares in ``query_serializers`` (HTTP method → serializer)
and nothing else: an undeclared parameter is 400 ``unknown_parameter``, a repeated one or an empty value
(``?task=``) is 400 ``invalid`` naming it. The ``DeclaredQueryOnly`` permission checks it for every API view
before the view runs and leaves the validated values in ``request.query``; the schema documents the same
declarations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rest_framework import permissions, serializers
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.request import Request

from nexum.core.text import NOT_BLANK, encodes, is_storable
from nexum_web.api.declarations import declared_for

UNKNOWN_FIELD = "unknown_field"
UNKNOWN_PARAMETER = "unknown_parameter"

# The JSON types a stock DRF field accepts without coercion, most specific classes first.
_JSON_TYPES: tuple[tuple[type[serializers.Field], tuple[type, ...], str], ...] = (
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.DecimalField, (int, float), "a number"),
    (serializers.MultipleChoiceField, (list,), "an array"),
    (serializers.ChoiceField, (str,), "a string"),
    (serializers.CharField, (str,), "a string"),
    (serializers.UUIDField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a string"),
    (serializers.DateField, (str,), "a string"),
    (serializers.ListField, (list,), "an array"),
    (serializers.ListSerializer, (list,), "an array"),
    (serializers.DictField, (dict,), "an object"),
    (serializers.Serializer, (dict,), "an object"),
)


def _json_type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _type_error(field: serializers.Field, value: object) -> tuple[str, str] | None:
    """``(path suffix, message)`` when ``value`` (or an element of it) is not of the JSON type ``field``
    takes."""
    if value is None:
        return None  # the field's own allow_null decides
    for klass, types, name in _JSON_TYPES:
        if isinstance(field, klass):
            if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
                return "", f"must be {name}, not {_json_type_name(value)}"
            break
    else:
        return None  # JSONField and custom fields take any JSON
    if blank_refused(field) and isinstance(value, str) and not re.search(NOT_BLANK, value):
        return "", "may not be blank"
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        for index, element in enumerate(value):
            error = _type_error(field.child, element)
            if error:
                return f"[{index}]{error[0]}", error[1]
    if isinstance(field, serializers.DictField) and isinstance(value, dict):
        for key, element in value.items():
            error = _type_error(field.child, element)
            if error:
                return f".{key}{error[0]}", error[1]
    return None


def blank_refused(field: serializers.Field) -> bool:
    return isinstance(field, serializers.CharField) and not field.allow_blank and not field.read_only


def _unstorable(value: Any) -> str | None:
    """The path (suffix) of the first string in ``value`` (keys included) holding NUL or an unpaired
    surrogate; None when there is none."""
    if isinstance(value, str):
        return None if is_storable(value) else ""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not is_storable(str(key)):
                return ""
            inner = _unstorable(item)
            if inner is not None:
                return f".{key}{inner}"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            inner = _unstorable(item)
            if inner is not None:
                return f"[{index}]{inner}"
    return None


def printable(name: object) -> str:
    """A member name safe to echo in an error: itself, or its escaped form if it cannot be stored."""
    text = str(name)
    return text if is_storable(text) else ascii(text)


def _error(name: str, message: str, code: str = "invalid") -> ValidationError:
    return ValidationError({name: [ErrorDetail(message, code=code)]})


class StrictInput(serializers.Serializer):
    """The base of every request body: unknown members, wrong JSON types, blank text where it may not be
    and unstorable strings refused. ``exclusive`` lists pairs of members a body may not carry together
    (the schema says ``not: {required: [a, b]}``); ``requires_one_of`` lists members of which a body gives
    at least one, not null (the schema says ``anyOf`` of each one required)."""

    exclusive: tuple[tuple[str, str], ...] = ()
    requires_one_of: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            fields = self.fields
            unknown = sorted(printable(name) for name in data if name not in fields or fields[name].read_only)
            if unknown:
                accepted = ", ".join(sorted(name for name, field in fields.items() if not field.read_only))
                raise _error(unknown[0], f"unknown field (accepted: {accepted})", code=UNKNOWN_FIELD)
            for name, value in data.items():
                bad = _unstorable(value)
                if bad is not None:
                    raise _error(f"{name}{bad}", "must not hold NUL or an unpaired surrogate")
                error = _type_error(fields[name], value)
                if error:
                    raise _error(f"{name}{error[0]}", error[1])
            for first, second in self.exclusive:
                if first in data and second in data:
                    raise _error(second, f"give {first} or {second}, not both")
            if self.requires_one_of and all(data.get(name) is None for name in self.requires_one_of):
                raise _error(self.requires_one_of[0], f"give one of {', '.join(self.requires_one_of)}")
        return super().to_internal_value(data)


# --- query strings ----------------------------------------------------------------------------------------

_INTEGER = re.compile(r"-?[0-9]{1,19}")
_BOOLEANS = {"true": True, "false": False}


class StrictQuery(serializers.Serializer):
    """The base of every query declaration: integers as digits, booleans as ``true``/``false`` only."""

    def to_internal_value(self, data: Any) -> Any:
        values = {}
        for name, field in self.fields.items():
            if name not in data:
                continue
            value = data[name]
            if isinstance(field, serializers.BooleanField):
                if value not in _BOOLEANS:
                    raise _error(name, "must be true or false")
                value = _BOOLEANS[value]
            elif isinstance(field, serializers.IntegerField) and not _INTEGER.fullmatch(value):
                raise _error(name, "must be an integer")
            values[name] = value
        return super().to_internal_value(values)


def query_serializer(view: object, method: str) -> type[StrictQuery] | None:
    """The query declaration ``view`` makes for ``method``, if any (HEAD has GET's)."""
    declaration: type[StrictQuery] | None = declared_for(view, "query_serializers", method)
    return declaration


def validate_query(request: Request, declaration: type[StrictQuery] | None) -> dict[str, Any]:
    """The validated values of the request's query string against ``declaration`` (none: no parameter)."""
    params = request.query_params
    fields = declaration().fields if declaration else {}
    for name in sorted(params):
        shown = printable(name)
        if name not in fields:
            accepted = ", ".join(sorted(fields)) or "none"
            raise _error(shown, f"unknown query parameter (accepted: {accepted})", code=UNKNOWN_PARAMETER)
        values = params.getlist(name)
        if len(values) > 1:
            raise _error(shown, "give this parameter once")
        if values[0] == "":
            raise _error(shown, "an empty value is not a filter: leave the parameter out")
        if not encodes(values[0]) or "\x00" in values[0]:
            raise _error(shown, "must not hold NUL or an unpaired surrogate")
    if declaration is None:
        return {}
    query = declaration(data=params)
    query.is_valid(raise_exception=True)
    return dict(query.validated_data)


class DeclaredQueryOnly(permissions.BasePermission):
    """Checks the query string against the view's declaration before the view runs (a default permission
    class of every API view, after authentication and the role check); the view reads ``request.query``."""

    def has_permission(self, request: Request, view: object) -> bool:
        request.query = validate_query(request, query_serializer(view, request.method or ""))
        return True
