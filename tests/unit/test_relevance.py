"""BM25 relevance used by the compiler (SPEC C2, C5): deterministic, order-independent, cheap to skip."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from nexum.core.world.relevance import (
    Document,
    bm25_scores,
    query_stems,
    rank_by_relevance,
    stems_of,
    terms_of,
)


def docs(**texts: str) -> list[Document]:
    return [Document(doc_id, terms_of(text)) for doc_id, text in texts.items()]


def test_terms_are_lowercase_alphanumeric_runs() -> None:
    assert terms_of("Make auth_spec.rb pass — HTTP 401!") == (
        "make",
        "auth",
        "spec",
        "rb",
        "pass",
        "http",
        "401",
    )
    assert terms_of("") == ()
    assert terms_of("Überprüfung café") == ("überprüfung", "café")


def test_documents_without_a_query_term_score_nothing() -> None:
    scores = bm25_scores(terms_of("redis cache"), docs(a="redis is required", b="postgres only"))
    assert set(scores) == {"a"}
    assert scores["a"] > 0


def test_more_matching_terms_rank_higher() -> None:
    ranked = rank_by_relevance(
        terms_of("authentication spec fails"),
        docs(one="the spec", two="the authentication spec", three="authentication spec fails here"),
    )
    assert [doc_id for doc_id, _ in ranked] == ["three", "two", "one"]


def test_rare_terms_weigh_more_than_common_ones() -> None:
    corpus = docs(
        common1="spec spec",
        common2="spec other",
        common3="spec more",
        rare="redis other",
    )
    scores = bm25_scores(["spec", "redis"], corpus)
    assert scores["rare"] > scores["common2"]


def test_shorter_documents_win_at_equal_term_frequency() -> None:
    scores = bm25_scores(["redis"], docs(short="redis required", long="redis " + "filler " * 30))
    assert scores["short"] > scores["long"]


def test_ties_and_zero_scores_are_ordered_by_id() -> None:
    ranked = rank_by_relevance(["redis"], docs(c="redis", a="redis", b="nothing", d="nothing"))
    assert [doc_id for doc_id, _ in ranked] == ["a", "c", "b", "d"]
    assert ranked[-1][1] == 0.0


def test_empty_query_or_corpus_scores_nothing() -> None:
    assert bm25_scores([], docs(a="redis")) == {}
    assert bm25_scores(["redis"], []) == {}


words = st.sampled_from(["auth", "spec", "redis", "token", "the", "fails", "line", "48", "schema", "db"])


@settings(max_examples=200, deadline=None)
@given(
    corpus=st.lists(st.lists(words, max_size=12), min_size=1, max_size=25),
    query=st.lists(words, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_scores_do_not_depend_on_document_or_query_order(
    corpus: list[list[str]], query: list[str], seed: int
) -> None:
    documents = [Document(f"d{index:03d}", tuple(terms)) for index, terms in enumerate(corpus)]
    shuffled = documents[:]
    random.Random(seed).shuffle(shuffled)
    assert bm25_scores(query, documents) == bm25_scores(list(reversed(query)), shuffled)
    assert rank_by_relevance(query, documents) == rank_by_relevance(query, shuffled)
    assert all(score > 0 for score in bm25_scores(query, documents).values())


def reference_bm25(query: list[str], documents: list[Document], k1: float = 1.2, b: float = 0.75) -> dict:
    """BM25 as written out plainly: each document's terms walked one by one, summed in the order they first
    occur in it."""
    wanted = set(query)
    if not wanted or not documents:
        return {}
    average = sum(len(document.terms) for document in documents) / len(documents) or 1.0
    frequencies = []
    for document in documents:
        counts: dict[str, int] = {}
        for term in document.terms:
            if term in wanted:
                counts[term] = counts.get(term, 0) + 1
        frequencies.append(counts)
    having = {term: sum(term in counts for counts in frequencies) for term in wanted}
    scores = {}
    for document, counts in zip(documents, frequencies, strict=True):
        norm = k1 * (1.0 - b + b * len(document.terms) / average)
        score = 0.0
        for term, count in counts.items():
            idf = math.log(1.0 + (len(documents) - having[term] + 0.5) / (having[term] + 0.5))
            score += idf * count * (k1 + 1.0) / (count + norm)
        if score > 0.0:
            scores[document.id] = score
    return scores


@settings(max_examples=300, deadline=None)
@given(
    corpus=st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=15), min_size=1, max_size=20),
    query=st.lists(st.sampled_from("abcdefghij"), max_size=6),
)
def test_scores_are_bm25_summed_in_the_order_terms_first_occur(
    corpus: list[list[str]], query: list[str]
) -> None:
    documents = [Document(f"d{index:03d}", tuple(terms)) for index, terms in enumerate(corpus)]
    assert bm25_scores(query, documents) == reference_bm25(query, documents)


def test_stems_drop_stopwords_and_meet_across_inflections() -> None:
    assert stems_of(terms_of("The retries in the payments queue were retried")) == (
        "retri",
        "payment",
        "queue",
        "retri",
    )
    assert query_stems("the of in and") == frozenset()
    assert stems_of(("databases", "the")) == stems_of(("database",))


def test_a_stopword_query_ranks_nothing_and_a_stem_finds_its_inflection() -> None:
    documents = [
        Document(doc_id, stems_of(terms_of(text)))
        for doc_id, text in {"a": "the cache in the middle", "b": "retrying failed payments"}.items()
    ]
    assert bm25_scores(query_stems("in the"), documents) == {}
    assert set(bm25_scores(query_stems("payment retries"), documents)) == {"b"}
