"""``folder``: a local folder or git repository, read in line chunks (repository_authored); scopes are path
prefixes or globs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

from nexum.adapters.source_policy import ConfinementRefused, SourcePolicy
from nexum.adapters.sources.base import Clock, SourcePlugin, labels_of, match_score, query_terms, utc_now
from nexum.adapters.sources.registry import source_kind
from nexum.core.digests import sha256_hex
from nexum.core.errors import ValidationFailed
from nexum.core.resolution.model import (
    ANY_SCOPE,
    Freshness,
    RetrievedItem,
)


def _validate_scope_pattern(scope: str) -> str:
    """A scope is ``*``, a relative path prefix or a glob; never absolute, never climbing out with ``..``."""
    if not isinstance(scope, str) or not scope.strip():
        raise ValidationFailed("a scope must be a non-empty string", field="scopes")
    if scope == ANY_SCOPE:
        return scope
    cleaned = scope.replace("\\", "/")
    if cleaned.startswith("/") or re.match(r"^[A-Za-z]:", cleaned) or "\x00" in cleaned:
        raise ValidationFailed(f"scope {scope!r} must be relative to the folder", field="scopes")
    if ".." in PurePosixPath(cleaned).parts:
        raise ValidationFailed(f"scope {scope!r} climbs out of the folder", field="scopes")
    return cleaned


def path_in_scope(relative: str, scope: str) -> bool:
    if scope == ANY_SCOPE:
        return True
    if any(ch in scope for ch in "*?["):
        return fnmatchcase(relative, scope)
    prefix = scope.rstrip("/")
    return prefix in ("", ".") or relative == prefix or relative.startswith(prefix + "/")


@source_kind("folder")
class FolderSource(SourcePlugin):
    """A local folder or git repository. Files are read in line chunks; nothing outside the folder is read:
    the folder itself must be one the policy allows, scopes with ``..`` or absolute paths are refused, and a
    file whose real path leaves the folder or the policy (a symlink, even one planted after the source was
    configured) is skipped. The revision is the HEAD commit when the folder is in a git work tree, else a
    hash of the files."""

    compiles_as = "code"
    config_keys = SourcePlugin.config_keys | {"path", "chunk_lines", "max_file_bytes", "exclude"}
    default_exclude = (".git/*", ".git", "*/.git/*", "node_modules/*", "*/node_modules/*", "__pycache__/*",
                       "*/__pycache__/*", ".venv/*")  # fmt: skip

    def __init__(
        self,
        name: str,
        root: str | os.PathLike[str],
        *,
        policy: SourcePolicy,
        chunk_lines: int = 80,
        max_file_bytes: int = 512 * 1024,
        exclude: Sequence[str] = (),
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        for scope in self.declared_scopes:
            _validate_scope_pattern(scope)
        path = policy.confine_path(root, option="path")
        if not path.is_dir():
            raise ValidationFailed(f"{root} is not a directory", field="path")
        self.written_by(policy.writer_of(path))
        if isinstance(chunk_lines, bool) or not isinstance(chunk_lines, int) or chunk_lines < 1:
            raise ValidationFailed("chunk_lines must be a positive integer", field="chunk_lines")
        if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes < 1:
            raise ValidationFailed("max_file_bytes must be a positive integer", field="max_file_bytes")
        self.policy = policy
        self.root = path
        self.chunk_lines = chunk_lines
        self.max_file_bytes = max_file_bytes
        self.exclude = (*self.default_exclude, *exclude)

    @classmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> SourcePlugin:
        options = cls.common_options(config, default_freshness=Freshness(track_revision=True))
        if not isinstance(config.get("path"), str):
            raise ValidationFailed(f"a {cls.kind} source needs a path", field="path")
        extra = {key: config[key] for key in ("chunk_lines", "max_file_bytes") if key in config}
        exclude = config.get("exclude", [])
        if isinstance(exclude, str) or not isinstance(exclude, list | tuple):
            raise ValidationFailed("exclude must be a list of globs", field="exclude")
        return cls(
            name, config["path"], policy=policy, exclude=tuple(exclude), clock=clock, **extra, **options
        )

    # revision

    def _git_head(self) -> str | None:
        try:
            completed = subprocess.run(
                ["git", "-C", str(self.root), "rev-parse", "--is-inside-work-tree", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        lines = completed.stdout.split()
        if completed.returncode != 0 or len(lines) != 2 or lines[0] != "true":
            return None
        head = lines[1].strip()
        return head if re.fullmatch(r"[0-9a-f]{40,64}", head) else None

    def current_revision(self) -> str:
        head = self._git_head()
        if head is not None:
            return f"git:{head}"
        files = []
        for relative, path in self._files():
            try:
                with self.policy.open_file(path, inside=self.root) as handle:
                    files.append([relative, sha256_hex(handle.read())])
            except (OSError, ConfinementRefused):
                continue
        return "sha256:" + sha256_hex(json.dumps(files, sort_keys=True))

    # walking, confined to the folder

    def _excluded(self, relative: str) -> bool:
        return any(fnmatchcase(relative, pattern) for pattern in self.exclude)

    def _inside(self, path: Path) -> Path | None:
        """The real path of ``path`` if it stays inside the folder and the policy (symlinks resolved), else
        ``None``."""
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        return real if self.policy.path_refusal(real) is None and real.is_relative_to(self.root) else None

    def _files(self) -> Iterator[tuple[str, Path]]:
        for directory, dirnames, filenames in os.walk(self.root, followlinks=False):
            base = Path(directory)
            dirnames[:] = sorted(
                d for d in dirnames
                if not self._excluded((base / d).relative_to(self.root).as_posix() + "/x")
                and d != ".git"
            )  # fmt: skip
            for filename in sorted(filenames):
                path = base / filename
                relative = path.relative_to(self.root).as_posix()
                if self._excluded(relative):
                    continue
                real = self._inside(path)
                if real is None or not real.is_file():
                    continue  # a symlink escaping the folder, or something that is not a regular file
                yield relative, real

    def _read_text(self, path: Path) -> str | None:
        """The file's text; ``None`` when it is binary, too large, unreadable or refused by the policy (the
        file actually opened is checked, so a swap after the walk is caught too)."""
        try:
            with self.policy.open_file(path, inside=self.root) as handle:
                if os.fstat(handle.fileno()).st_size > self.max_file_bytes:
                    return None
                data = handle.read(self.max_file_bytes + 1)
        except (OSError, ConfinementRefused):
            return None
        if len(data) > self.max_file_bytes:
            return None
        if b"\x00" in data[:8192]:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _scoped_files(self, scopes: Sequence[str]) -> Iterator[tuple[str, Path]]:
        checked = [_validate_scope_pattern(scope) for scope in self._validate_scopes(scopes)]
        for relative, path in self._files():
            if any(path_in_scope(relative, scope) for scope in checked):
                yield relative, path

    def read(self, relative: str) -> str:
        """The text of one file by its path relative to the folder, refusing any escape."""
        cleaned = _validate_scope_pattern(relative)
        real = self._inside(self.root / cleaned)
        if real is None or not real.is_file():
            raise ValidationFailed(f"{relative!r} is not a file inside the folder", field="locator")
        text = self._read_text(real)
        if text is None:
            raise ValidationFailed(f"{relative!r} is binary or too large", field="locator")
        return text

    # items

    def _chunks(self, relative: str, text: str) -> Iterator[tuple[str, str, str]]:
        lines = text.splitlines(keepends=True)
        for start in range(0, max(len(lines), 1), self.chunk_lines):
            chunk = "".join(lines[start : start + self.chunk_lines])
            if chunk.strip():
                end = min(start + self.chunk_lines, len(lines))
                yield f"{relative}#L{start + 1}-{end}", relative, chunk

    def _sections(self, relative: str, text: str) -> Iterator[tuple[str, str, str]]:
        """(locator, subject, text) for each piece of one file."""
        yield from self._chunks(relative, text)

    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        limit = self._validate_limit(limit)
        terms = query_terms(query or "")
        revision = self.current_revision()
        observed_at = self.clock()
        trust = self.highest_trust
        scored: list[tuple[int, str, int, str, str, str]] = []
        for relative, path in self._scoped_files(scopes):
            text = self._read_text(path)
            if text is None:
                continue
            for position, (locator, subject, piece) in enumerate(self._sections(relative, text)):
                score = match_score(terms, piece, bonus_text=f"{relative} {subject}")
                if terms and score == 0:
                    continue
                scored.append((-score, relative, position, locator, subject, piece))
        scored.sort()
        return [
            RetrievedItem(
                source=self.name,
                locator=locator,
                revision=revision,
                text=piece,
                trust_class=trust,
                observed_at=observed_at,
                subject=subject,
                labels=labels_of(piece, trust),
            )
            for _score, _relative, _position, locator, subject, piece in scored[:limit]
        ]
