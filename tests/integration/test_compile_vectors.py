"""Vectors and entities carried to the compiler (issue 24 items 1, 7): the candidate cache carries the stored
vectors (read for changed rows only), a compile embeds its query and its request evidence, embeds once and
stores the vectors of items stored before, records its embedder, and a replay ranks by the recorded one.

Compiler version 5 is the first to rank by meaning (``compile_input.VECTORS_FROM``); the tests that run the
whole compile path lower it to the current version, whose digest does not cover the vectors."""

from __future__ import annotations

import uuid

import pytest

from context_app.compilation import candidate_rows
from context_app.compilation.candidates import CandidateCache
from context_app.compilation.models import ContextCompilation, StoredContext
from context_app.compilation.selectors import compile_input
from context_app.compilation.services import compiles, folds
from context_app.compilation.services.replays import context_replay
from context_app.world.embedder import configured_embedder, configured_embedder_id
from context_app.world.models import ItemVector, WorldItem
from context_app.world.services.facts import fact_record
from context_app.world.services.scopes import scope_resolve
from nexum.adapters.embedding import embedder_named
from nexum.adapters.tokenization import counter_for
from nexum.core.compilation.ranking import query_text
from nexum.core.compilation.versions import COMPILER_VERSION
from nexum.core.errors import PolicyRefused
from nexum.eventstore import reading
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db

ENCODING = "cl100k_base"


@pytest.fixture
def auth(project):
    return build_auth_world(project, filler=10)


@pytest.fixture
def cache(monkeypatch):
    """A candidate cache of the test's own, used by the selectors and the compile service."""
    fresh = CandidateCache()
    monkeypatch.setattr(compile_input, "CANDIDATES", fresh)
    monkeypatch.setattr(folds, "CANDIDATES", fresh)
    return fresh


@pytest.fixture
def ranked_by_meaning(monkeypatch, cache):
    """Compiles of the current version name their embedder, as version 5 will."""
    monkeypatch.setattr(compile_input, "VECTORS_FROM", COMPILER_VERSION)


class CountingEmbedder:
    name = "counting"
    version = "1"
    dimensions = 4
    calls: list[list[str]] = []

    def embed(self, texts):
        CountingEmbedder.calls.append(list(texts))
        return [bytes([len(text) % 100, 1, 2, 3]) for text in texts]


def counting() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def counting_embedder(settings):
    settings.NEXUM_EMBEDDER = "tests.integration.test_compile_vectors:counting"
    embedder_named.cache_clear()
    CountingEmbedder.calls.clear()
    yield
    embedder_named.cache_clear()


def input_for(auth, version: int = 5, **kwargs):
    return compile_input.compile_input_for(
        task=auth.task,
        encoding=ENCODING,
        counter=counter_for(ENCODING),
        version=version,
        embedder=configured_embedder(),
        **kwargs,
    )


def compile_for(auth, **kwargs):
    return compiles.context_compile(
        project_id=auth.project_id, task_id=str(auth.task.id), model_word="quick", actor="test", **kwargs
    )


def test_a_version_5_input_carries_stored_vectors_entities_and_the_query_vector(auth, cache):
    evidence = [{"kind": "code", "id": "auth.rb", "text": "def valid?\n  token.signed?\nend"}]
    task_input = input_for(auth, extra_evidence=evidence, focus="the expiry check in app/auth.rb")
    ci = task_input.compile_input
    embedder = configured_embedder()
    assert ci.embedder == configured_embedder_id() and ci.embedder.startswith("wordllama-")
    assert ci.query_vector == embedder.embed([query_text(ci)])[0]
    stored = dict(ItemVector.objects.values_list("item_id", "vector"))
    assert ci.facts and all(bytes(stored[uuid.UUID(f.id)]) == f.vector for f in ci.facts)
    call = next(item for item in ci.evidence if item.id == auth.tool_call_id)
    assert call.vector is not None and "spec/auth_spec.rb:48" in call.entities
    code = next(item for item in ci.evidence if item.id == "request:auth.rb")
    assert code.vector == embedder.embed(["def valid?\n  token.signed?\nend"])[0]
    assert all(item.vector is None for item in (*ci.progress, *ci.failures, *ci.decisions))
    assert task_input.embedded == ()  # every stored item had its vector


def test_an_older_version_and_no_embedder_compile_by_words_alone(auth, cache, settings):
    ci = input_for(auth, version=4).compile_input
    assert (ci.embedder, ci.query_vector) == ("", b"")
    assert all(item.vector is None for item in ci.facts)
    settings.NEXUM_EMBEDDER = "none"
    ci = input_for(auth).compile_input
    assert (ci.embedder, ci.query_vector) == ("", b"")
    assert all(item.vector is None for item in ci.facts)


def test_vectors_are_read_for_the_rows_that_changed_only(auth, cache, monkeypatch):
    """The stored vectors come with the changed rows, in the candidate query itself: every ranked item's on
    the first read, none when nothing changed, the new fact's alone after it is recorded."""
    read: list[dict[str, bool]] = []
    changed_rows = candidate_rows.changed_rows

    def recording(*args, **kwargs):
        rows = changed_rows(*args, **kwargs)
        read.append({row.id: row.vector is not None for row in rows if row.kind in ("fact", "tool_call")})
        return rows

    monkeypatch.setattr("context_app.compilation.candidates.changed_rows", recording)
    input_for(auth)
    ranked = WorldItem.objects.filter(kind__in=("fact", "tool_call")).count()
    assert len(read) == 1 and len(read[0]) == ranked and all(read[0].values())
    read.clear()
    input_for(auth)
    assert read == []  # nothing changed: nothing read
    scope = scope_resolve(project_id=auth.project_id, goal_id=str(auth.goal.id))
    fact = fact_record(scope=scope, text="Tokens expire after 15 minutes", actor="test")
    facts = input_for(auth).compile_input.facts
    assert read == [{str(fact.id): True}]
    assert next(item for item in facts if item.id == str(fact.id)).vector is not None


def test_a_compile_embeds_items_stored_without_a_vector_once_and_stores_them(
    auth, counting_embedder, ranked_by_meaning
):
    facts = WorldItem.objects.filter(kind__in=("fact", "tool_call")).count()
    assert not ItemVector.objects.filter(embedder="counting@1").exists()  # stored under another embedder
    outcome = compile_for(auth)
    item_batches = [batch for batch in CountingEmbedder.calls if len(batch) == facts]
    assert len(item_batches) == 1  # every item without a vector, in one call
    assert ItemVector.objects.filter(embedder="counting@1").count() == facts
    assert outcome.context.embedder == "counting@1"
    CountingEmbedder.calls.clear()
    compile_input.CANDIDATES.clear()  # a fresh process: the vectors are read, not made
    compile_for(auth)
    assert all(len(batch) < facts for batch in CountingEmbedder.calls)


def test_the_embedder_is_recorded_shown_and_replayed(auth, ranked_by_meaning, api):
    outcome = compile_for(auth, focus="why auth_spec.rb fails at line 48")
    name = configured_embedder_id()
    assert outcome.context.embedder == name
    assert ContextCompilation.objects.get(request_id=outcome.request_id).embedder == name
    recorded = [stored.event for stored in reading.read_stream(f"compile-{outcome.request_id}")][-1]
    assert recorded.embedder == name
    body = api.get(f"/api/v1/contexts/{outcome.context.digest}").json()
    assert body["embedder"] == name
    replay = context_replay(project_id=auth.project_id, digest=outcome.context.digest)
    assert replay.matches


def test_a_replay_whose_embedder_cannot_be_loaded_says_so(auth, ranked_by_meaning, settings, api):
    outcome = compile_for(auth)
    StoredContext.objects.filter(pk=outcome.context.pk).update(embedder="retired-model@7")
    settings.NEXUM_EMBEDDER = "none"
    with pytest.raises(PolicyRefused, match="retired-model@7") as refused:
        context_replay(project_id=auth.project_id, digest=outcome.context.digest)
    assert refused.value.code == "embedder_unavailable"
    answer = api.post(f"/api/v1/contexts/{outcome.context.digest}/replay")
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "embedder_unavailable"


def test_contexts_compiled_before_embedders_replay_by_words_alone(auth, cache, monkeypatch):
    with monkeypatch.context() as earlier:
        earlier.setattr(compiles, "COMPILER_VERSION", 4)  # a compile of the release before embedders
        before = compile_for(auth)
    assert (before.context.embedder, before.context.compiler_version) == ("", 4)
    assert context_replay(project_id=auth.project_id, digest=before.context.digest).matches


def test_with_no_embedder_the_compile_records_none_and_is_lexical(auth, ranked_by_meaning, settings, api):
    settings.NEXUM_EMBEDDER = "none"
    outcome = compile_for(auth)
    assert outcome.context.embedder == ""
    assert api.get(f"/api/v1/contexts/{outcome.context.digest}").json()["embedder"] is None
    assert context_replay(project_id=auth.project_id, digest=outcome.context.digest).matches


def test_evidence_and_the_query_are_embedded_in_one_call_and_not_again(auth, cache, counting_embedder):
    evidence = [{"kind": "diagnostic", "id": "lint", "text": "auth.rb:12 unused variable"}]
    input_for(auth)  # the candidates' vectors made (they were stored under the default embedder)
    CountingEmbedder.calls.clear()
    compile_input._EVIDENCE_VECTORS.clear()
    first = input_for(auth, extra_evidence=evidence, focus="the unused variable").compile_input
    assert len(CountingEmbedder.calls) == 1
    assert CountingEmbedder.calls[0] == [query_text(first), "auth.rb:12 unused variable"]
    CountingEmbedder.calls.clear()
    again = input_for(auth, extra_evidence=evidence, focus="the unused variable").compile_input
    assert CountingEmbedder.calls == []
    assert again.query_vector == first.query_vector
    lint = next(item for item in again.evidence if item.id == "request:lint")
    assert lint.vector == bytes([len("auth.rb:12 unused variable") % 100, 1, 2, 3])
