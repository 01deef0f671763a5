"""Exact int8 vectors, named entities and the default embedder (issue 24 items 1 and 4)."""

import subprocess
import sys

import numpy as np
import pytest

from nexum.adapters.embedding import UnknownEmbedder, embedder_id, embedder_named
from nexum.core.world.entities import entities_of, with_heads
from nexum.core.world.vectors import cosines, quantize


def test_quantize_maps_the_largest_component_to_127_and_rounds_half_away_from_zero():
    assert np.frombuffer(quantize([254, -127, 1, 0, -1, 3]), dtype=np.int8).tolist() == [
        127,
        -64,
        1,
        0,
        -1,
        2,
    ]
    assert quantize([0, 0, 0]) == bytes(3)


def test_cosines_are_exact_integer_arithmetic_and_zero_for_empty_or_foreign_vectors():
    a = quantize([3, 4, 0])
    assert cosines(a, [a, bytes(3), bytes(5)]) == [1.0, 0.0, 0.0]
    assert cosines(bytes(3), [a]) == [0.0]


def test_cosines_depend_on_each_pair_alone_never_on_the_other_vectors_or_their_order():
    rng = np.random.default_rng(24)
    vectors = [rng.integers(-127, 128, 16, dtype=np.int8).tobytes() for _ in range(300)]
    query = rng.integers(-127, 128, 16, dtype=np.int8).tobytes()
    scores = cosines(query, vectors)
    assert cosines(query, vectors[::-1]) == scores[::-1]
    assert cosines(query, vectors[:1]) == scores[:1]


def test_entities_are_paths_identifiers_and_names_not_words_or_numbers():
    text = (
        "app/auth/session.py signs cookies with SESSION_KEY_ID, read from secret/web/keyring; AdminUser rows "
        "use app.crypto.fernet_field and otp_secrets. Run with --dry-run on billing-api, version 1.2.3, 30 s."
    )
    assert entities_of(text) == (
        "--dry-run",
        "adminuser",
        "app.crypto.fernet_field",
        "app/auth/session.py",
        "billing-api",
        "otp_secrets",
        "secret/web/keyring",
        "session_key_id",
    )
    assert entities_of("Sessions stay valid for their remaining lifetime.") == ()


def test_the_heads_of_qualified_names_are_entities_too_but_not_the_parts_of_paths():
    named = entities_of(
        "FlagClient.init blocks; spans go to otel-collector.observability:4317 from app/auth/x.py"
    )
    assert with_heads(named) == {
        "flagclient.init",
        "flagclient",
        "otel-collector.observability:4317",
        "otel-collector.observability",
        "otel-collector",
        "app/auth/x.py",
    }
    assert with_heads(("v1.2", "ab.cd", "--dry-run.x")) == {"v1.2", "ab.cd", "--dry-run.x"}


def test_the_default_embedder_is_offline_int8_and_nearest_by_meaning():
    embedder = embedder_named("wordllama")
    assert embedder.dimensions == 256 and embedder_id(embedder).startswith("wordllama-l2_supercat-256-int8@")
    step, near, far = embedder.embed(
        [
            "Rotate the database password",
            "Change the credentials of the Postgres account",
            "The cafeteria serves lunch at noon",
        ]
    )
    assert len(step) == 256
    to_near, to_far = cosines(step, [near, far])
    assert to_near > to_far


def test_a_text_has_the_same_vector_in_another_process():
    text = "Columns of otp_secrets are encrypted with app.crypto.fernet_field"
    here = embedder_named("wordllama").embed([text])[0].hex()
    program = (
        "from nexum.adapters.embedding import embedder_named as e; "
        f"print(e('wordllama').embed([{text!r}])[0].hex())"
    )
    there = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert there == here


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("word-llama", "is not 'wordllama', 'none' or 'package.module:factory'"),
        ("nexum.nothing_here:make", "cannot be loaded"),
        ("nexum.core.world.vectors:quantize_missing", "cannot be loaded"),
    ],
)
def test_an_unknown_embedder_is_refused_with_a_clear_message(spec, message):
    with pytest.raises(UnknownEmbedder, match=message):
        embedder_named(spec)


def test_none_turns_embeddings_off():
    assert embedder_named("none") is None and embedder_id(None) == ""
