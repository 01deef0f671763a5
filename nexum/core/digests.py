"""Canonical serialization and content digests: one definition used for every digest Nexum computes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def canonical_json(value: Any) -> str:
    """A byte-stable JSON text: sorted keys, no insignificant whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json_of_members(members: Mapping[str, str]) -> str:
    """The canonical JSON of an object whose member values come already serialized (each the
    ``canonical_json`` of its value): the same text as ``canonical_json`` of the object, so a large member
    serialized once can be both digested and stored."""
    return "{" + ",".join(f"{canonical_json(key)}:{members[key]}" for key in sorted(members)) + "}"


def canonical_json_of_strings(strings: Sequence[str]) -> str:
    """``canonical_json`` of a list of strings, joined directly when none needs escaping (tens of thousands
    of ids serialize several times faster); the same text either way."""
    probe = "".join(strings)
    if '"' in probe or "\\" in probe or not probe.isprintable():
        return canonical_json(list(strings))
    return '["' + '","'.join(strings) + '"]' if strings else "[]"


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """The sha256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))
