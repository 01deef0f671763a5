"""Dense relevance vectors as exact integers (issue 24, SPEC C5): int8 components, integer dot products.

An embedder (``nexum.adapters.embedding``) turns a text into a vector once, when the item is stored, and keeps
it quantized to signed bytes (``quantize``: the largest component maps to ±127, every other one is rounded
half away from zero with integer arithmetic). Scoring is then integer arithmetic only: the dot product of
two int8 vectors is an exact integer whatever the order of the sum, so the cosine computed from it and the
two exact squared norms (one correctly rounded square root and one correctly rounded division) is the same
float on every machine, in every process and in replay.

Cosines are not centered on the candidates: subtracting their mean sharpens a world of many topics, but in a
world of one topic (a project's) it makes every off-topic text look like the step, since both then differ
from the mean in the same direction. The embedder centers its own token table instead
(``nexum.adapters.embedding``), and the compiler judges a score against the typical candidate's
(``ranking._relevant_first``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

INT8_MAX = 127


def quantize(values: Sequence[int]) -> bytes:
    """``values`` (integers: the embedder's exact sum of token vectors) as int8 bytes, scaled so the largest
    magnitude is 127; all zeros stay zeros. Integer arithmetic only: the same bytes everywhere."""
    largest = max(map(abs, values), default=0)
    if not largest:
        return bytes(len(values))
    half = largest // 2
    scaled = [
        (value * INT8_MAX + half) // largest if value >= 0 else -((-value * INT8_MAX + half) // largest)
        for value in values
    ]
    return np.asarray(scaled, dtype=np.int8).tobytes()


def as_matrix(vectors: Sequence[bytes], dimensions: int) -> np.ndarray:
    """The vectors as the rows of an int32 matrix (a row of zeros for a vector of another length)."""
    rows = [vector if len(vector) == dimensions else bytes(dimensions) for vector in vectors]
    if not rows:
        return np.zeros((0, dimensions), dtype=np.int32)
    return np.frombuffer(b"".join(rows), dtype=np.int8).reshape(len(rows), dimensions).astype(np.int32)


def cosines(query: bytes, vectors: Sequence[bytes]) -> list[float]:
    """The cosine of ``query`` with each of ``vectors`` (0.0 for a zero vector or one of another length, and
    for all of them when ``query`` is zero), from exact integer dot products and squared norms (int64)."""
    dimensions = len(query)
    if not vectors or not any(query):
        return [0.0] * len(vectors)
    matrix = as_matrix(vectors, dimensions).astype(np.int64)
    query_row = np.frombuffer(query, dtype=np.int8).astype(np.int64)
    query_norm = int(query_row @ query_row)
    if not query_norm:
        return [0.0] * len(vectors)
    dots = (matrix @ query_row).tolist()
    norms = np.einsum("ij,ij->i", matrix, matrix).tolist()
    return [
        dot / math.sqrt(norm * query_norm) if norm else 0.0 for dot, norm in zip(dots, norms, strict=True)
    ]
