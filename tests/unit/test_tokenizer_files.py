"""Operator-supplied tokenizer encodings from local .tiktoken files (SPEC §5: the card names its encoding)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from nexum.tokenization import DEFAULT_ENCODING, EncodingRegistry, TiktokenCounter, UnknownEncoding


def write_tiktoken(path: Path, merges: list[bytes]) -> Path:
    """Every single byte, then ``merges`` in rank order: a tiny but complete byte-level BPE."""
    tokens = [bytes([value]) for value in range(256)] + merges
    path.write_bytes(b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in enumerate(tokens)))
    return path


def test_an_encoding_registered_from_a_local_file_counts(tmp_path):
    path = write_tiktoken(tmp_path / "tiny.tiktoken", [b"ab", b"abab", b" ab"])
    registry = EncodingRegistry({"tiny": str(path)})
    assert "tiny" in registry.names()
    registry.check("tiny")
    counter = TiktokenCounter("tiny", registry)
    assert counter.count("abab") == 1
    assert counter.count("ab") == 1
    assert counter.count("xyz") == 3  # no merges: one token per byte
    assert counter.count("abab ab") == 2
    assert counter.count("") == 0


def test_a_file_edited_in_place_is_read_again_by_a_new_registry(tmp_path):
    path = write_tiktoken(tmp_path / "tiny.tiktoken", [])
    assert TiktokenCounter("tiny", EncodingRegistry({"tiny": str(path)})).count("abab") == 4
    write_tiktoken(path, [b"ab"])
    assert TiktokenCounter("tiny", EncodingRegistry({"tiny": str(path)})).count("abab") == 2


@pytest.mark.parametrize(
    ("complete", "contents"),
    [
        (False, b"not a tiktoken file\n"),
        (False, b"YQ== one\n"),
        (False, b"%%% 0\n"),
        (False, b""),
        (False, b"YQ== 0\n"),  # a single token: most bytes uncovered
        (True, b"YWI= 0\n"),  # a merge repeating rank 0 (tiktoken's core would panic)
        (True, b"YWI= -1\n"),
    ],
)
def test_a_malformed_file_is_an_unknown_encoding_not_a_crash(tmp_path, complete, contents):
    path = tmp_path / "bad.tiktoken"
    if complete:
        write_tiktoken(path, [])
    path.write_bytes((path.read_bytes() if complete else b"") + contents)
    with pytest.raises(UnknownEncoding) as raised:
        EncodingRegistry({"bad": str(path)}).check("bad")
    assert raised.value.code == "unknown_encoding"
    assert raised.value.field == "encoding"


def test_a_missing_file_or_name_is_an_unknown_encoding(tmp_path):
    registry = EncodingRegistry({"gone": str(tmp_path / "gone.tiktoken")})
    for name in ("gone", "o200k_nonexistent"):
        with pytest.raises(UnknownEncoding):
            registry.check(name)
    registry.check(DEFAULT_ENCODING)
