"""How the resolver compares subjects and claims.

Subjects are compared case-insensitively with whitespace collapsed; an item on a nested subject
(``"Deploy > Port"``, ``"src/app/x.py"``) also answers its parent (``"Deploy"``, ``"src/app"``); see
``subject_matches``.
"""

from __future__ import annotations

_SUBJECT_SEPARATORS = ("/", " > ", "#", "::")


def normalize_subject(subject: str) -> str:
    return " ".join(subject.casefold().split())


def normalize_claim(text: str) -> str:
    """The form claims are compared in: case-folded, whitespace collapsed, trailing punctuation dropped."""
    return " ".join(text.casefold().split()).rstrip(" .;:!")


def subject_matches(item_subject: str | None, wanted: str) -> bool:
    """True when an item on ``item_subject`` speaks to ``wanted``: the same subject or one nested under it."""
    if not item_subject or not wanted.strip():
        return False
    have, want = normalize_subject(item_subject), normalize_subject(wanted)
    return have == want or any(have.startswith(want + sep) for sep in _SUBJECT_SEPARATORS)


def subjects_related(subject: str, other: str) -> bool:
    return subject_matches(subject, other) or subject_matches(other, subject)
