"""A resolve's inputs: what a caller sends, validated (source names, grant scopes, required questions), the
required questions as stored, and the query a step's resolve sends its sources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nexum.core.errors import NotFound, ValidationFailed
from nexum.core.resolution.model import RequiredQuestion

SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_QUESTIONS = 50
MAX_QUESTION_CHARS = 2000
MAX_SCOPES = 100
MAX_REQUEST_ID_CHARS = 150


def validate_source_name(name: Any) -> str:
    if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
        raise ValidationFailed(
            "a source name is 1–100 letters, digits, '_', '.' or '-', starting with a letter or digit",
            field="name",
        )
    return name


def validate_resolve_request_id(request_id: Any) -> str:
    """A caller's name for a resolve request (its ``Idempotency-Key``, or one made for it)."""
    if not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_REQUEST_ID_CHARS:
        raise ValidationFailed(f"request_id must be 1–{MAX_REQUEST_ID_CHARS} characters", field="request_id")
    return request_id


def validate_grant_scopes(scopes: Any) -> dict[str, tuple[str, ...]]:
    """``{source name: [scope, …]}``; an empty list means every scope the source declares (``*``). A name
    that cannot be a source's names no source: ``NotFound``, as for a name the project lacks."""
    if not isinstance(scopes, Mapping) or not scopes:
        raise ValidationFailed("a grant lists at least one source: {name: [scopes]}", field="sources")
    checked: dict[str, tuple[str, ...]] = {}
    for name, granted in scopes.items():
        if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
            raise NotFound(f"no source {name!r}: not a source name", field="sources")
        if isinstance(granted, str) or not isinstance(granted, list | tuple):
            raise ValidationFailed(f"the scopes of {name!r} must be a list of strings", field="sources")
        if len(granted) > MAX_SCOPES or not all(isinstance(s, str) and s.strip() for s in granted):
            raise ValidationFailed(
                f"the scopes of {name!r} must be up to {MAX_SCOPES} non-empty strings", field="sources"
            )
        checked[name] = tuple(sorted(set(granted))) or ("*",)
    return dict(sorted(checked.items()))


def validate_questions(questions: Any) -> tuple[RequiredQuestion, ...]:
    """``[{question, subjects: [...]}, …]`` → ``RequiredQuestion``s (subjects may be given as ``subject``)."""
    if isinstance(questions, str) or not isinstance(questions, list | tuple):
        raise ValidationFailed("questions must be a list", field="questions")
    if len(questions) > MAX_QUESTIONS:
        raise ValidationFailed(f"at most {MAX_QUESTIONS} required questions", field="questions")
    checked = []
    for entry in questions:
        if not isinstance(entry, Mapping):
            raise ValidationFailed("each question is an object {question, subjects}", field="questions")
        unknown = sorted(set(entry) - {"question", "subjects", "subject"})
        if unknown:
            raise ValidationFailed(f"unknown question member {unknown[0]!r}", field="questions")
        text = entry.get("question")
        subjects = entry.get("subjects", [entry["subject"]] if "subject" in entry else [])
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_QUESTION_CHARS:
            raise ValidationFailed(
                f"a question is a non-empty text of at most {MAX_QUESTION_CHARS} characters",
                field="questions",
            )
        if isinstance(subjects, str) or not isinstance(subjects, list | tuple):
            raise ValidationFailed("subjects must be a list of strings", field="questions")
        if not all(isinstance(s, str) and len(s) <= 500 for s in subjects):
            raise ValidationFailed("subjects must be strings of at most 500 characters", field="questions")
        checked.append(RequiredQuestion(question=text.strip(), subjects=tuple(subjects)))
    return tuple(checked)


def questions_to_data(questions: Iterable[RequiredQuestion]) -> tuple[dict[str, Any], ...]:
    return tuple({"question": q.question, "subjects": list(q.subjects)} for q in questions)


def questions_from_data(data: Iterable[Mapping[str, Any]]) -> tuple[RequiredQuestion, ...]:
    return tuple(RequiredQuestion(question=q["question"], subjects=tuple(q["subjects"])) for q in data)


def build_query(objective: str, inputs: Sequence[str], questions: Sequence[RequiredQuestion]) -> str:
    """What the resolver asks its sources for a step: its objective, inputs, and required questions."""
    parts = [objective, *inputs]
    for question in questions:
        parts.append(question.question)
        parts.extend(question.subjects)
    return " ".join(" ".join(part.split()) for part in parts if part and part.strip())[:4000]
