"""The content-addressed artifact store: bytes kept by their sha256, on the filesystem by default.

Layout: ``<root>/<sha256[:2]>/<sha256>``. The same content is stored once. A write goes to a temporary file in
the target folder and is renamed into place, so a reader never sees a partial file. Content larger than
``settings.NEXUM_ARTIFACT_MAX_BYTES`` is refused (``TooLarge``) before anything is written.

The file is written before the event that refers to it is appended: if the append then fails, an unreferenced
file is left behind (harmless: content-addressed, and the same content reuses it), never an event pointing at
missing content.

Tamper evidence: every read hashes the bytes it read and compares them with the digest they are stored under.
A mismatch is never served: it logs an integrity alarm (logger ``nexum.integrity``, ERROR, with the digest
and the path) and raises ``ArtifactIntegrityError`` (409 ``artifact_integrity``). Callers whose answer is the
bytes themselves let it propagate; callers that show stored text inside a larger record use
``stored_text``, which puts ``INTEGRITY_ALARM_TEXT`` in its place. A write of content whose file was tampered
with replaces the file (the writer holds the true bytes) and logs the alarm too. The store must live outside
every workspace (``context_app.world.system_checks``): a command check must never reach it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from nexum.core.errors import Conflict, DomainError, NotFound, TooLarge, ValidationFailed
from nexum.core.world.items import SHA256_HEX

integrity_log = logging.getLogger("nexum.integrity")

INTEGRITY_ALARM_TEXT = "[integrity alarm: the stored content does not match its sha256; withheld]"


class ArtifactIntegrityError(Conflict):
    """Stored content no longer hashes to the digest it is stored under: it was changed on disk."""

    code = "artifact_integrity"


@dataclass(frozen=True)
class StoredContent:
    sha256: str
    size: int
    created: bool
    """False when the same content was already in the store."""


class FilesystemArtifactStore:
    def __init__(self, root: Path | str, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def validate_size(self, size: int, *, field: str = "content") -> None:
        if size > self.max_bytes:
            raise TooLarge(
                f"artifact content is {size} bytes; the limit is {self.max_bytes}",
                field=field,
                details={"size": size, "max_bytes": self.max_bytes},
            )

    def path_for(self, sha256: str) -> Path:
        if not SHA256_HEX.match(sha256):
            raise ValidationFailed("a content digest is 64 lowercase hex digits", field="sha256")
        return self.root / sha256[:2] / sha256

    def put(self, content: bytes) -> StoredContent:
        self.validate_size(len(content))
        digest = hashlib.sha256(content).hexdigest()
        target = self.path_for(digest)
        if target.is_file():
            if self._hashes_to(target, digest):
                return StoredContent(digest, len(content), created=False)
            self._alarm(digest, target, "rewritten with the true content")
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{digest}.", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(content)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return StoredContent(digest, len(content), created=True)

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def read(self, sha256: str) -> bytes:
        """The content stored under ``sha256``, verified: ``ArtifactIntegrityError`` (and an alarm) when the
        bytes read do not hash to it."""
        path = self.path_for(sha256)
        if not path.is_file():
            raise NotFound(f"no artifact content {sha256}", field="sha256")
        content = path.read_bytes()
        if hashlib.sha256(content).hexdigest() != sha256:
            self._alarm(sha256, path, "not served")
            raise ArtifactIntegrityError(
                f"the stored content {sha256} does not match its sha256; it was changed on disk and is not"
                " served (the operator has an integrity alarm)",
                field="sha256",
                details={"sha256": sha256},
            )
        return content

    @staticmethod
    def _hashes_to(path: Path, sha256: str) -> bool:
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest() == sha256
        except OSError:
            return False

    @staticmethod
    def _alarm(sha256: str, path: Path, outcome: str) -> None:
        integrity_log.error(
            "integrity alarm: artifact content %s at %s does not match its sha256 (%s)", sha256, path, outcome
        )


def default_store() -> FilesystemArtifactStore:
    """The store configured in settings (read on every call, so tests may override the settings)."""
    return FilesystemArtifactStore(settings.NEXUM_ARTIFACT_ROOT, settings.NEXUM_ARTIFACT_MAX_BYTES)


def stored_text(sha256: str) -> str:
    """Stored content shown inside a larger record (a check's output, a model's answer), as text: empty when
    there is none, ``INTEGRITY_ALARM_TEXT`` in place of content that fails verification."""
    if not sha256:
        return ""
    try:
        return default_store().read(sha256).decode("utf-8", errors="replace")
    except ArtifactIntegrityError:
        return INTEGRITY_ALARM_TEXT
    except DomainError:
        return ""
