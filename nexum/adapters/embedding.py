"""The embedder adapters behind relevance by meaning (issue 24 item 1): a text → an int8 vector, exactly.

The default, ``wordllama``, is WordLlama's ``l2_supercat`` static token embeddings (256 dimensions), whose
weights and tokenizer ship inside the ``wordllama`` wheel: nothing is downloaded, it runs on a CPU in
microseconds per text, and it needs only ``numpy``, ``safetensors`` and ``tokenizers``. A static model
pools token vectors, so it can be made exact: the float16 table is quantized once to int8 (one scale for the
whole table, elementwise rounding) and centered on its integer mean row, a text's vector is the integer sum
of its tokens' rows (WordLlama's
average pooling up to a scale, which a cosine ignores), quantized again to int8
(``nexum.core.world.vectors.quantize``). Every step is integer arithmetic after the elementwise table
rounding, so a text has the same vector on every machine and in every process. A transformer embedder's floats
are not reproducible across machines, which is why it is not the default; any embedder is recorded by name and
version with each compile, and its vectors are stored when items are written, so replay never re-embeds an
item.

``NEXUM_EMBEDDER`` names the embedder: ``wordllama`` (the default), ``none`` (lexical relevance only), or
``package.module:factory`` for an operator's own (a callable returning an ``Embedder``).
"""

from __future__ import annotations

import hashlib
import importlib
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Protocol, runtime_checkable

from nexum.core.errors import ValidationFailed
from nexum.core.world.vectors import INT8_MAX, quantize

DEFAULT_EMBEDDER = "wordllama"
NO_EMBEDDER = "none"
MAX_TOKENS = 512
"""Tokens of a text that count toward its vector (the rest of a long text adds nothing a step needs)."""


class UnknownEmbedder(ValidationFailed):
    code = "unknown_embedder"


@runtime_checkable
class Embedder(Protocol):
    """A text → an int8 vector of ``dimensions`` bytes, deterministic; ``name`` and ``version`` identify the
    vectors it makes (a compile records both; vectors of another name or version are not comparable)."""

    name: str
    version: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[bytes]: ...


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` 256-d, int8 throughout (see the module docstring)."""

    name = "wordllama-l2_supercat-256-int8"
    dimensions = 256

    def __init__(self) -> None:
        import numpy as np
        import wordllama
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        package = Path(wordllama.__file__).parent
        weights_path = package / "weights" / "l2_supercat_256.safetensors"
        table = load_file(str(weights_path))["embedding.weight"].astype(np.float32)
        scale = INT8_MAX / float(np.abs(table).max())
        quantized = np.rint(table * scale).astype(np.int64)
        # Centered on the vocabulary's mean row (integer): the direction every token shares says nothing.
        self._table = quantized - quantized.sum(axis=0) // len(quantized)
        self._tokenizer = Tokenizer.from_file(
            str(package / "tokenizers" / "l2_supercat_tokenizer_config.json")
        )
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        digest = hashlib.sha256(weights_path.read_bytes()).hexdigest()[:12]
        self.version = f"{wordllama.__version__}+{digest}"
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[bytes]:
        if not texts:
            return []
        with self._lock:  # a tokenizers object is not documented as safe to share between threads
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        vectors = []
        for encoding in encodings:
            ids = encoding.ids[:MAX_TOKENS]
            if not ids:
                vectors.append(bytes(self.dimensions))
                continue
            vectors.append(quantize(self._table[ids].sum(axis=0).tolist()))
        return vectors


@cache
def embedder_named(spec: str) -> Embedder | None:
    """The embedder ``spec`` names (``NEXUM_EMBEDDER``), loaded once per process; ``None`` for ``none``."""
    if spec == NO_EMBEDDER:
        return None
    if spec == DEFAULT_EMBEDDER:
        return WordLlamaEmbedder()
    module_name, _, factory_name = spec.partition(":")
    if not module_name or not factory_name:
        raise UnknownEmbedder(
            f"NEXUM_EMBEDDER {spec!r} is not {DEFAULT_EMBEDDER!r}, {NO_EMBEDDER!r} "
            "or 'package.module:factory'",
            field="embedder",
        )
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as error:
        raise UnknownEmbedder(
            f"NEXUM_EMBEDDER {spec!r} cannot be loaded: {error}", field="embedder"
        ) from error
    embedder = factory()
    if not isinstance(embedder, Embedder) or not embedder.name or not embedder.version:
        raise UnknownEmbedder(
            f"NEXUM_EMBEDDER {spec!r} did not return an embedder (a name, a version, dimensions and embed())",
            field="embedder",
        )
    return embedder


def embedder_id(embedder: Embedder | None) -> str:
    """``name@version``, what a compile records; empty for no embedder."""
    return "" if embedder is None else f"{embedder.name}@{embedder.version}"
