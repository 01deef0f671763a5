"""Deterministic BM25 relevance for the context compiler (SPEC C2, C4, C5).

Texts are turned into terms once, when an item is stored (``terms_of``: lowercase words, as they are), and the
compiler scores those stored terms against the query. From compiler version 4 both sides are normalized first
(``stems_of``): English stopwords dropped and every other word reduced to its Snowball English stem, so
"the"/"in" rank nothing and "retries"/"retried" meet. Normalizing at compile time (memoized per distinct
word) leaves the stored terms as they were, so a context compiled by an older version replays from the same
rows. Scoring is cheap on large corpora: a document that shares no term with the query is skipped with one
C-level set test, and only matching documents are counted. Scores depend only on a document's terms and the
corpus statistics, never on the order documents arrive in.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

import Stemmer

_TERM = re.compile(r"[^\W_]+")

_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m o re ve y also may might must shall via per"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
"""English function words (Snowball's list, trimmed): they occur everywhere, so they only add noise."""

_STEMS: dict[str, str] = {}
"""Each word seen, mapped to its stem ("" for a stopword); bounded by ``_MAX_STEMS`` distinct words."""
_MAX_STEMS = 500_000
_STEMMER_LOCK = threading.Lock()
_STEMMER = Stemmer.Stemmer("english")

DEFAULT_K1 = 1.2
DEFAULT_B = 0.75


def terms_of(text: str) -> tuple[str, ...]:
    """The lowercase alphanumeric terms of ``text``, in order, duplicates kept (BM25 needs frequencies)."""
    return tuple(_TERM.findall(text.lower()))


def stems_of(terms: Iterable[str]) -> tuple[str, ...]:
    """``terms`` (as ``terms_of`` gives them) normalized for scoring: stopwords dropped, the others stemmed
    (Snowball English), in order, duplicates kept. Deterministic: a pure function of the words."""
    terms = tuple(terms)
    try:
        return tuple(filter(None, map(_STEMS.__getitem__, terms)))
    except KeyError:
        return tuple(filter(None, map(_learn(terms).__getitem__, terms)))


def query_stems(text: str) -> frozenset[str]:
    """The normalized terms of a query text, as a set (BM25 uses the query as a set)."""
    return frozenset(stems_of(terms_of(text)))


def _learn(terms: Sequence[str]) -> dict[str, str]:
    """The stem of every word of ``terms``, kept in ``_STEMS`` too (the stemmer is not thread-safe, hence the
    lock; the memo is emptied when it would outgrow ``_MAX_STEMS``)."""
    words = sorted(set(terms))
    with _STEMMER_LOCK:
        stems = {
            word: "" if word in STOPWORDS else stem
            for word, stem in zip(words, _STEMMER.stemWords(words), strict=True)
        }
        if len(_STEMS) + len(stems) > _MAX_STEMS:
            _STEMS.clear()
        _STEMS.update(stems)
    return stems


class Document(NamedTuple):
    """A plain document; anything with ``id`` and ``terms`` attributes (a ``ContextItem``) scores as well."""

    id: str
    terms: tuple[str, ...]


class HasTerms(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def terms(self) -> Sequence[str]: ...


_terms_of_document = attrgetter("terms")


def bm25_scores(
    query_terms: Iterable[str],
    documents: Sequence[HasTerms],
    *,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    terms_of_document: Callable[[Any], Sequence[str]] = _terms_of_document,
) -> dict[str, float]:
    """BM25 scores of ``documents`` for the query, by document id; documents that score 0 are absent. A
    document's terms are ``terms_of_document(document)`` (its ``terms``; a caller whose documents keep their
    normalized terms elsewhere says where, and makes no document of its own for them).

    IDF is the non-negative form ``ln(1 + (N - df + 0.5) / (df + 0.5))``. Query terms are used as a set, and
    a document's terms are summed in the order they occur in it, so the floating-point result is the same for
    any order of the query or of the documents.
    A document that shares no term with the query costs one C-level set test.
    """
    query = frozenset(query_terms)
    total_documents = len(documents)
    if not query or not total_documents:
        return {}
    average_length = sum(map(len, map(terms_of_document, documents))) / total_documents or 1.0

    matches: list[tuple[str, dict[str, int], int]] = []
    document_frequency: dict[str, int] = {}
    isdisjoint = query.isdisjoint
    for document in documents:
        terms = terms_of_document(document)
        if isdisjoint(terms):
            continue
        frequencies: dict[str, int] = {}
        for term in terms:
            if term in query:
                frequencies[term] = frequencies.get(term, 0) + 1
        for term in frequencies:
            document_frequency[term] = document_frequency.get(term, 0) + 1
        matches.append((document.id, frequencies, len(terms)))

    idf = {
        term: math.log(1.0 + (total_documents - count + 0.5) / (count + 0.5))
        for term, count in document_frequency.items()
    }
    scores: dict[str, float] = {}
    # Terms are summed in the order they first occur in the document: a property of the document alone.
    for document_id, frequencies, length in matches:
        norm = k1 * (1.0 - b + b * length / average_length)
        score = 0.0
        for term, frequency in frequencies.items():
            score += idf[term] * frequency * (k1 + 1.0) / (frequency + norm)
        if score > 0.0:
            scores[document_id] = max(score, scores.get(document_id, 0.0))
    return scores


def rank_by_relevance(query_terms: Iterable[str], documents: Sequence[HasTerms]) -> list[tuple[str, float]]:
    """``(id, score)`` for every document, best first; equal scores (including 0) are ordered by id."""
    scores = bm25_scores(query_terms, documents)
    ranked = [(document.id, scores.get(document.id, 0.0)) for document in documents]
    ranked.sort(key=lambda pair: (-pair[1], pair[0]))
    return ranked
