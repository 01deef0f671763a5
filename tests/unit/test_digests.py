"""Canonical JSON and digests: one text for one value, however it is assembled."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nexum.core.digests import (
    canonical_json,
    canonical_json_of_members,
    canonical_json_of_strings,
    digest_of,
    sha256_hex,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), JSON_VALUES, max_size=6))
def test_an_object_assembled_from_serialized_members_is_its_canonical_json(value: dict) -> None:
    members = {key: canonical_json(member) for key, member in value.items()}
    assert canonical_json_of_members(members) == canonical_json(value)
    assert sha256_hex(canonical_json_of_members(members)) == digest_of(value)


def test_canonical_json_sorts_keys_and_keeps_unicode() -> None:
    assert canonical_json({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'


@given(st.lists(st.text() | st.uuids().map(str) | st.sampled_from(['a"b', "c\\d", "e\nf", "é", "\u2028"])))
def test_a_list_of_strings_written_directly_is_its_canonical_json(strings: list[str]) -> None:
    assert canonical_json_of_strings(strings) == canonical_json(strings)
    assert canonical_json_of_strings(tuple(strings)) == canonical_json(strings)
