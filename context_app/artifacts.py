"""The content-addressed artifact store: bytes kept by their sha256, on the filesystem by default.

Layout: ``<root>/<sha256[:2]>/<sha256>``. The same content is stored once. A write goes to a temporary file in
the target folder and is renamed into place, so a reader never sees a partial file. Content larger than
``settings.NEXUM_ARTIFACT_MAX_BYTES`` is refused (``TooLarge``) before anything is written.

The file is written before the event that refers to it is appended: if the append then fails, an unreferenced
file is left behind (harmless: content-addressed, and the same content reuses it), never an event pointing at
missing content.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from nexum.core.errors import NotFound, TooLarge, ValidationFailed
from nexum.core.world import SHA256_HEX


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

    def check_size(self, size: int, *, field: str = "content") -> None:
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
        self.check_size(len(content))
        digest = hashlib.sha256(content).hexdigest()
        target = self.path_for(digest)
        if target.is_file():
            return StoredContent(digest, len(content), created=False)
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
        path = self.path_for(sha256)
        if not path.is_file():
            raise NotFound(f"no artifact content {sha256}", field="sha256")
        return path.read_bytes()


def default_store() -> FilesystemArtifactStore:
    """The store configured in settings (read on every call, so tests may override the settings)."""
    return FilesystemArtifactStore(settings.NEXUM_ARTIFACT_ROOT, settings.NEXUM_ARTIFACT_MAX_BYTES)
