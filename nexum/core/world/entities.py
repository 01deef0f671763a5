"""Named entities of a text, for second hops (issue 24 item 4): the things two facts can be about at once.

An entity is a token that names one thing rather than saying something: a file path (``app/auth/session.py``,
``secret/web/keyring``), a dotted name (``app.crypto.fernet_field``), a snake_case or SCREAMING_CASE
identifier (``otp_secrets``, ``SESSION_KEYRING``), a CamelCase name (``AdminUser``), a flag (``--dry-run``)
or a hyphenated name (``billing-api``). Plain words, numbers and versions are not entities. Entities are
compared in lowercase; the result is sorted, so it is a pure function of the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CANDIDATE = re.compile(r"[A-Za-z0-9_./:\-]+")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_LETTER = re.compile(r"[A-Za-z]")
_HYPHENATED = re.compile(r"[A-Za-z]-[A-Za-z]")
_NUMERIC = re.compile(r"[\d.:\-/]+")
MIN_LENGTH = 3
MAX_ENTITIES = 64


def is_entity(token: str) -> bool:
    """Whether ``token`` (already stripped of trailing punctuation) names one thing."""
    if len(token) < MIN_LENGTH or not _LETTER.search(token) or _NUMERIC.fullmatch(token):
        return False
    if token.startswith("--") or "/" in token or "_" in token:
        return True
    if "." in token.strip("."):
        return True
    if _CAMEL.search(token):
        return True
    if token.isupper() and len(token) >= 4:
        return True
    return bool(_HYPHENATED.search(token))


def entities_of(*texts: str) -> tuple[str, ...]:
    """The entities of ``texts``, lowercase, sorted, at most ``MAX_ENTITIES`` (the first in sorted order)."""
    found = set()
    for text in texts:
        for raw in _CANDIDATE.findall(text or ""):
            token = raw.strip(".:-/") if not raw.startswith("--") else raw.rstrip(".:/")
            if is_entity(token):
                found.add(token.lower())
    return tuple(sorted(found)[:MAX_ENTITIES])


_QUALIFIER = re.compile(r"[.:]")


def with_heads(entities: Iterable[str]) -> frozenset[str]:
    """``entities`` with the heads of their qualified names: each prefix of a dotted or colon-qualified
    name before a ``.`` or ``:`` (``flagclient.init`` → ``flagclient``, ``otel-collector.observability:4317``
    → ``otel-collector``, ``otel-collector.observability``), so a fact about ``FlagClient.init`` links to one
    about ``FlagClient``. Paths keep only themselves (``app/auth`` says little about ``app/auth/session.py``),
    and a head must be an entity name's length and not a number."""
    found = set(entities)
    for entity in entities:
        if "/" in entity or entity.startswith("--"):
            continue
        for separator in _QUALIFIER.finditer(entity):
            head = entity[: separator.start()]
            if len(head) >= MIN_LENGTH and _LETTER.search(head) and not _NUMERIC.fullmatch(head):
                found.add(head)
    return frozenset(found)
