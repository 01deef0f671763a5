"""Operator-supplied tokenizer encodings from local files (SPEC §5: the card names its encoding): tiktoken BPE
files and Hugging Face tokenizer.json files, each counted exactly as its own library counts."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexum.adapters.tokenization import DEFAULT_ENCODING, EncodingRegistry, UnknownEncoding
from tests.tokenizer_files import (
    SENTENCES,
    library_count,
    write_byte_level_bpe,
    write_tiktoken,
    write_wordpiece,
)


def test_an_encoding_registered_from_a_local_file_counts(tmp_path):
    path = write_tiktoken(tmp_path / "tiny.tiktoken", [b"ab", b"abab", b" ab"])
    registry = EncodingRegistry({"tiny": str(path)})
    assert "tiny" in registry.names()
    registry.check("tiny")
    counter = registry.counter("tiny")
    assert counter.count("abab") == 1
    assert counter.count("ab") == 1
    assert counter.count("xyz") == 3  # no merges: one token per byte
    assert counter.count("abab ab") == 2
    assert counter.count("") == 0


def test_a_file_edited_in_place_is_read_again_by_a_new_registry(tmp_path):
    path = write_tiktoken(tmp_path / "tiny.tiktoken", [])
    assert EncodingRegistry({"tiny": str(path)}).counter("tiny").count("abab") == 4
    write_tiktoken(path, [b"ab"])
    assert EncodingRegistry({"tiny": str(path)}).counter("tiny").count("abab") == 2


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


# --- Hugging Face tokenizer.json ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizers")
    return {
        "llama-like": write_byte_level_bpe(folder / "bpe-tokenizer.json"),
        "bert-like": write_wordpiece(folder / "wordpiece-tokenizer.json"),
    }


@pytest.fixture(scope="module")
def hf_registry(hf_files):
    return EncodingRegistry({name: str(path) for name, path in hf_files.items()})


def test_a_tokenizer_json_registered_from_a_local_file_counts_as_the_library_does(hf_files):
    registry = EncodingRegistry({name: str(path) for name, path in hf_files.items()})
    assert {"llama-like", "bert-like"} <= set(registry.names())
    text = "\n".join(SENTENCES) + " Zürich ☃ 🙂 <|endoftext|>"
    for name, path in hf_files.items():
        registry.check(name)
        assert registry.counter(name).count(text) == library_count(path, text)
        assert registry.counter(name).count("") == 0


def test_a_tokenizer_json_count_adds_no_template_tokens_and_ignores_the_files_truncation(hf_files):
    path = hf_files["llama-like"]
    counter = EncodingRegistry({"llama-like": str(path)}).counter("llama-like")
    from tokenizers import Tokenizer

    as_saved = Tokenizer.from_file(str(path))
    long_text = " ".join(SENTENCES * 3)
    assert len(as_saved.encode(long_text).ids) == 16  # the file truncates and adds <s> … </s>
    assert counter.count(long_text) == library_count(path, long_text) > 16
    assert counter.count("verify_token") == len(as_saved.encode("verify_token").ids) - 2  # no <s>, </s>
    # an added token spelled out in the text is the one token the library makes of it
    assert counter.count("<|im_start|>") == 1


@pytest.mark.parametrize(
    ("name", "contents"),
    [
        ("garbage.json", b"not json at all"),
        ("empty.json", b""),
        ("object.json", b'{"version": "1.0"}'),
        ("tiktoken.json", b"YQ== 0\n"),
    ],
)
def test_a_malformed_tokenizer_json_is_an_unknown_encoding_not_a_crash(tmp_path, name, contents):
    path = tmp_path / name
    path.write_bytes(contents)
    with pytest.raises(UnknownEncoding) as raised:
        EncodingRegistry({"bad": str(path)}).check("bad")
    assert raised.value.code == "unknown_encoding"
    assert raised.value.field == "encoding"
    assert str(path) in raised.value.message


def test_a_tokenizer_json_that_cannot_encode_unseen_text_is_refused_when_loaded(tmp_path):
    path = write_wordpiece(tmp_path / "no-unk.json", unknown_token=False)
    with pytest.raises(UnknownEncoding) as raised:
        EncodingRegistry({"no-unk": str(path)}).check("no-unk")
    assert "[UNK]" in raised.value.message


def test_a_missing_tokenizer_json_is_an_unknown_encoding(tmp_path):
    with pytest.raises(UnknownEncoding) as raised:
        EncodingRegistry({"gone": str(tmp_path / "gone.json")}).check("gone")
    assert "does not exist" in raised.value.message


_TRICKY = st.sampled_from(
    ["", " ", "\n", "\r\n", "\t", "\x00", "<s>", "</s>", "<|im_start|>", "[CLS]", "[UNK]", "##", "🙂",
     "\u200b", "é", "e\u0301", "漢字", "\ufeff", "'s", "  ", "`", "\\"]
)  # fmt: skip
_TEXTS = st.lists(
    st.one_of(_TRICKY, st.text(max_size=40), st.text(alphabet=string.printable, max_size=40)), max_size=8
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXTS)
def test_the_adapter_counts_exactly_what_the_library_counts_for_any_text(hf_files, hf_registry, text):
    for name, path in hf_files.items():
        counter = hf_registry.counter(name)  # one registry for every example: its cache is exercised too
        assert counter.count(text) == library_count(path, text)
        assert counter.count(text) == library_count(path, text)  # the cached count is the same
