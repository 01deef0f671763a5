"""Vectors and entities stored at write time (issue 24 items 1, 7): the configured embedder, one embed call
per batch of events, vectors kept per embedder, a rebuild recreating them, and the fill command for items
stored before."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError

from context_app.world.embedder import configured_embedder, configured_embedder_id
from context_app.world.models import ItemVector, WorldItem
from context_app.world.services.facts import fact_record
from context_app.world.services.records import progress_record, tool_call_record
from context_app.world.services.scopes import scope_resolve
from nexum.adapters.embedding import UnknownEmbedder, embedder_named
from nexum.core.world.entities import entities_of
from nexum.eventstore import projections
from tasks_app.services.goals import goal_create

pytestmark = pytest.mark.django_db


class CountingEmbedder:
    """A deterministic embedder of its own (``tests...:counting``) that counts its calls."""

    name = "counting"
    version = "1"
    dimensions = 4
    calls: list[int] = []

    def embed(self, texts):
        CountingEmbedder.calls.append(len(texts))
        return [bytes([len(text) % 100, 1, 2, 3]) for text in texts]


def counting() -> CountingEmbedder:
    return CountingEmbedder()


COUNTING = "tests.integration.test_item_vectors:counting"


@pytest.fixture
def scope(project):
    goal = goal_create(
        project_id=str(project.id),
        objective="Rotate the session keyring",
        tasks=[{"key": "s1", "objective": "Find the keyring"}],
        actor="test",
    )
    return scope_resolve(project_id=str(project.id), goal_id=str(goal.id))


def vector_of(item_id, embedder_id: str) -> bytes | None:
    row = ItemVector.objects.filter(item_id=item_id, embedder=embedder_id).first()
    return None if row is None else bytes(row.vector)


def test_a_fact_and_a_tool_call_get_their_vector_and_entities_when_recorded(scope):
    fact = fact_record(
        scope=scope, subject="keyring", text="SESSION_KEYRING lives in secret/web/keyring", actor="test"
    )
    call = tool_call_record(
        scope=scope, tool="vault_read", arguments={"path": "x"}, result_summary="read app.crypto", actor="t"
    )
    note = progress_record(scope=scope, text="Looked at secret/web/keyring", actor="test")
    name = configured_embedder_id()
    assert name.startswith("wordllama-")
    embedder = configured_embedder()
    assert (
        vector_of(fact.id, name)
        == embedder.embed(["keyring: SESSION_KEYRING lives in secret/web/keyring"])[0]
    )
    assert vector_of(call.id, name) is not None
    assert vector_of(note.id, name) is None  # progress ranks by recency: no vector, no entities
    rows = {row.id: row for row in WorldItem.objects.all()}
    assert rows[fact.id].entities_text.split() == ["secret/web/keyring", "session_keyring"]
    assert "app.crypto" in rows[call.id].entities_text.split()
    assert rows[note.id].entities_text == ""


def test_the_events_of_one_batch_are_embedded_in_one_call(scope, settings):
    settings.NEXUM_EMBEDDER = COUNTING
    embedder_named.cache_clear()
    CountingEmbedder.calls.clear()
    fact_record(scope=scope, text="one fact", actor="test")
    assert CountingEmbedder.calls == [1]
    CountingEmbedder.calls.clear()
    projections.rebuild()
    facts = WorldItem.objects.filter(kind="fact").count()
    assert CountingEmbedder.calls == [facts]  # the whole log is one batch of under a thousand events
    embedder_named.cache_clear()


def test_a_rebuild_recreates_vectors_and_entities_exactly(scope):
    for index in range(5):
        fact_record(
            scope=scope, subject=f"svc-{index}", text=f"billing-api v{index} reads otp_secrets", actor="t"
        )
    before = projections.snapshot()
    projections.rebuild()
    assert projections.snapshot() == before
    assert ItemVector.objects.count() == 5


def test_with_no_embedder_items_get_entities_and_no_vectors(scope, settings):
    settings.NEXUM_EMBEDDER = "none"
    fact = fact_record(scope=scope, text="AdminUser owns --dry-run", actor="test")
    assert not ItemVector.objects.exists()
    assert WorldItem.objects.get(id=fact.id).entities_text == "--dry-run adminuser"


def test_the_fill_command_embeds_items_stored_before_and_keeps_the_other_embedders_vectors(scope, settings):
    settings.NEXUM_EMBEDDER = "none"
    facts = [fact_record(scope=scope, text=f"fact {i} about app/auth.py", actor="t") for i in range(3)]
    WorldItem.objects.update(entities_text="")  # rows stored before entities existed
    settings.NEXUM_EMBEDDER = COUNTING
    embedder_named.cache_clear()
    CountingEmbedder.calls.clear()
    call_command("nexum_embed", "--project", "acme", "--batch", "2")
    assert CountingEmbedder.calls == [2, 1]
    assert all(vector_of(fact.id, "counting@1") for fact in facts)
    assert set(WorldItem.objects.values_list("entities_text", flat=True)) == {"app/auth.py"}
    CountingEmbedder.calls.clear()
    call_command("nexum_embed")  # nothing left to do
    assert CountingEmbedder.calls == []
    settings.NEXUM_EMBEDDER = "wordllama"
    call_command("nexum_embed")
    assert all(vector_of(fact.id, "counting@1") for fact in facts)  # a change of embedder keeps old vectors
    assert all(vector_of(fact.id, configured_embedder_id()) for fact in facts)
    embedder_named.cache_clear()


def test_the_fill_command_names_an_unknown_project():
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        call_command("nexum_embed", "--project", "nope")


@pytest.mark.parametrize(
    ("setting", "words"),
    [("no-such-embedder", "is not 'wordllama'"), ("no_such_module:make", "cannot be loaded")],
)
def test_an_unknown_embedder_is_a_start_up_error_naming_the_setting(settings, setting, words):
    settings.NEXUM_EMBEDDER = setting
    errors = [error for error in checks.run_checks() if error.id == "nexum.E006"]
    assert len(errors) == 1 and words in errors[0].msg and setting in errors[0].msg
    with pytest.raises(UnknownEmbedder):
        configured_embedder()
    settings.NEXUM_EMBEDDER = "wordllama"
    assert not [error for error in checks.run_checks() if error.id == "nexum.E006"]


def test_entities_are_the_named_things_of_the_meaning_text():
    assert entities_of("keyring: SESSION_KEYRING lives in secret/web/keyring") == (
        "secret/web/keyring",
        "session_keyring",
    )
