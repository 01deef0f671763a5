"""The source port and the built-in sources (SPEC R1, R11).

A source is a plugin: ``register_source_kind(kind, cls)`` plugs a new kind in, ``build_source(kind, name,
config)`` builds one from its stored configuration; the resolver only ever sees ``Source.spec`` and the items
a source returns. Sources do I/O (files, git, HTTP), so they live outside ``nexum.core``, but they import no
Django and are unit-testable on their own.

Built in:
- ``folder``: a local folder or git repository (repository_authored); scopes are path prefixes or globs.
- ``docs``: a folder of Markdown, one item per section; the subject is the heading path.
- ``tickets_json``: a JSON file of tickets.
- ``http_json``: a JSON endpoint (untrusted_retrieved), size-capped and time-limited.

Every built-in source reads only where the operator's ``SourcePolicy`` allows
(``nexum.adapters.source_policy``): checked when it is configured and again at every read.

Trust follows who can write (SPEC R4a): every source has ``writable_by`` (``agent`` or ``operator``,
``config.writable_by``); a path source over a folder the agent can write (inside the workspace root) is the
agent's whatever was declared, and its ``highest_trust`` is at most ``agent_reported``.

A source that cannot answer raises a ``SourceFailure``; ``fetch`` turns any failure into a failed
``SourceResult`` so that a source that is down makes the bundle incomplete instead of failing the resolve.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from nexum.adapters.source_policy import DEFAULT_PORTS, ConfinementRefused, SourcePolicy
from nexum.core.digests import sha256_hex
from nexum.core.errors import ValidationFailed
from nexum.core.resolution.model import (
    ANY_SCOPE,
    LABEL_SUSPECTED_INSTRUCTION,
    Freshness,
    RetrievedItem,
    SourceResult,
    SourceSpec,
)
from nexum.core.roles import AGENT, OPERATOR, check_role, content_ceiling
from nexum.core.trust import TrustClass, looks_like_instruction

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class SourceFailure(Exception):
    """A source could not answer. ``kind`` is ``unreachable``, ``timeout``, ``too_large``, ``malformed`` or
    ``error``."""

    kind = "error"

    def __init__(self, source: str, message: str, *, kind: str | None = None) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message
        if kind is not None:
            self.kind = kind


class SourceUnavailable(SourceFailure):
    """The source is down: connection refused, timed out, or answering with a server error."""

    kind = "unreachable"


class SourceResponseRejected(SourceFailure):
    """The source answered, but with something we refuse to read (too large, malformed)."""

    kind = "malformed"


class SourceRefused(SourceFailure):
    """The operator's source policy refused the read (a path or an address outside what it allows)."""

    kind = "refused"


# --- the port ---------------------------------------------------------------------------------------------


class Source(ABC):
    """One source behind the typed port (R1). Subclasses set ``kind`` and implement ``retrieve``."""

    kind: ClassVar[str]
    allowed_trust: ClassVar[frozenset[TrustClass]] = frozenset(
        {TrustClass.untrusted_retrieved, TrustClass.repository_authored}
    )
    default_trust: ClassVar[TrustClass] = TrustClass.repository_authored
    config_keys: ClassVar[frozenset[str]] = frozenset(
        {"scopes", "highest_trust", "ttl_seconds", "track_revision", "writable_by"}
    )

    def __init__(
        self,
        name: str,
        *,
        declared_scopes: Sequence[str] = (ANY_SCOPE,),
        highest_trust: TrustClass | None = None,
        freshness: Freshness | None = None,
        writable_by: str = OPERATOR,
        clock: Clock = utc_now,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValidationFailed("a source needs a name", field="name")
        trust = (
            self.default_trust
            if highest_trust is None
            else TrustClass.parse(highest_trust, field="highest_trust")
        )
        if trust not in self.allowed_trust:
            allowed = ", ".join(t.name for t in sorted(self.allowed_trust))
            raise ValidationFailed(
                f"a {self.kind} source cannot be {trust.name}; allowed: {allowed}", field="highest_trust"
            )
        scopes = tuple(declared_scopes)
        if not scopes or not all(isinstance(s, str) and s.strip() for s in scopes):
            raise ValidationFailed("scopes must be a non-empty list of strings", field="scopes")
        self.name = name
        self.declared_scopes = tuple(sorted(set(scopes)))
        self.declared_trust = trust
        self.freshness = freshness or Freshness()
        self.clock = clock
        self.writable_by = check_role(writable_by, field="writable_by")

    @property
    def highest_trust(self) -> TrustClass:
        """The class the source's items carry at most: what it was configured with, and never more than
        whoever can write it allows (R4a: what the agent can write is at most ``agent_reported``)."""
        return min(self.declared_trust, content_ceiling(self.writable_by))

    def written_by(self, writer: str | None) -> None:
        """Record who the server found can write the source (a path inside the workspace: the agent). The
        agent wins over whatever the operator declared: it can write there, whatever was claimed."""
        if writer == AGENT:
            self.writable_by = AGENT

    @property
    def spec(self) -> SourceSpec:
        return SourceSpec(
            name=self.name,
            kind=self.kind,
            declared_scopes=self.declared_scopes,
            highest_trust=self.highest_trust,
            freshness=self.freshness,
            writable_by=self.writable_by,
        )

    def current_revision(self) -> str | None:
        """The source's current revision, or ``None`` when it has none (TTL-only sources)."""
        return None

    @abstractmethod
    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        """Items matching ``query`` within ``scopes`` (already authorized), at most ``limit`` of them."""

    # helpers for subclasses

    @classmethod
    def common_options(cls, config: Mapping[str, Any], *, default_freshness: Freshness) -> dict[str, Any]:
        unknown = sorted(set(config) - cls.config_keys)
        if unknown:
            raise ValidationFailed(
                f"unknown {cls.kind} source option(s): {', '.join(unknown)}", field=unknown[0]
            )
        options: dict[str, Any] = {}
        if "scopes" in config:
            scopes = config["scopes"]
            if isinstance(scopes, str) or not isinstance(scopes, list | tuple):
                raise ValidationFailed("scopes must be a list of strings", field="scopes")
            options["declared_scopes"] = tuple(scopes)
        if "highest_trust" in config:
            options["highest_trust"] = TrustClass.parse(config["highest_trust"], field="highest_trust")
        if "writable_by" in config:
            options["writable_by"] = check_role(config["writable_by"], field="writable_by")
        ttl = config.get("ttl_seconds", default_freshness.ttl_seconds)
        track = config.get("track_revision", default_freshness.track_revision)
        if not isinstance(track, bool):
            raise ValidationFailed("track_revision must be true or false", field="track_revision")
        options["freshness"] = Freshness(ttl_seconds=ttl, track_revision=track)
        return options

    @classmethod
    @abstractmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> Source:
        """Build the source from its stored configuration, confined by ``policy``; malformed options raise
        ``ValidationFailed``, options the policy refuses ``SourceNotAllowed``."""

    def _check_scopes(self, scopes: Sequence[str]) -> tuple[str, ...]:
        if isinstance(scopes, str):
            raise ValidationFailed("scopes must be a list", field="scopes")
        return tuple(sorted(set(scopes)))

    def _check_limit(self, limit: int) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValidationFailed("limit must be a non-negative integer", field="limit")
        return limit


_KINDS: dict[str, type[Source]] = {}


def register_source_kind(kind: str, cls: type[Source]) -> None:
    """Plug in a source kind. Registering the same class again is harmless; another class is refused."""
    if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", kind):
        raise ValidationFailed(f"invalid source kind {kind!r}", field="kind")
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise ValidationFailed("a source kind must be a Source subclass", field="kind")
    existing = _KINDS.get(kind)
    if existing is not None and existing is not cls:
        raise ValidationFailed(f"source kind {kind!r} is already registered", field="kind")
    _KINDS[kind] = cls


def source_kinds() -> tuple[str, ...]:
    return tuple(sorted(_KINDS))


def build_source(
    kind: str, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
) -> Source:
    cls = _KINDS.get(kind)
    if cls is None:
        raise ValidationFailed(
            f"unknown source kind {kind!r}; known: {', '.join(source_kinds())}", field="kind"
        )
    if not isinstance(config, Mapping):
        raise ValidationFailed("source config must be an object", field="config")
    return cls.from_config(name, config, policy=policy, clock=clock)


def fetch(source: Source, query: str, scopes: Sequence[str], limit: int) -> SourceResult:
    """Call ``source`` and wrap the outcome. Any failure (including a bug in a plugin) becomes a failed result
    so the resolve goes on and the bundle records the source as unavailable (R11)."""
    try:
        revision = source.current_revision()
        items = source.retrieve(query, scopes, limit)
    except SourceFailure as failure:
        return SourceResult.failed(source.name, failure.message, kind=failure.kind)
    except ValidationFailed:
        raise  # the caller asked for something malformed: that is the caller's error, not an outage
    except Exception as exc:  # a plugin's bug must not fail the resolve
        return SourceResult.failed(source.name, f"{type(exc).__name__}: {exc}", kind="error")
    return SourceResult.ok(source.name, items, current_revision=revision, writable_by=source.writable_by)


# --- query matching ---------------------------------------------------------------------------------------

_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "in", "is",
        "it", "of", "on", "or", "should", "the", "this", "to", "was", "what", "when", "where", "which", "who",
        "why", "with",
    }
)  # fmt: skip


def query_terms(query: str) -> tuple[str, ...]:
    terms = {t for t in re.findall(r"[a-z0-9_]+", query.casefold()) if len(t) > 1 and t not in _STOPWORDS}
    return tuple(sorted(terms))


def match_score(terms: Sequence[str], text: str, *, bonus_text: str = "") -> int:
    """Simple term matching: occurrences of each term in ``text``, plus 3 per term found in ``bonus_text``
    (a path or a heading)."""
    lowered, bonus = text.casefold(), bonus_text.casefold()
    return sum(lowered.count(term) + (3 if term in bonus else 0) for term in terms)


def _label(item_text: str, trust: TrustClass) -> tuple[str, ...]:
    if trust < TrustClass.repository_authored and looks_like_instruction(item_text):
        return (LABEL_SUSPECTED_INSTRUCTION,)
    return ()


# --- folder -----------------------------------------------------------------------------------------------


def _check_scope_pattern(scope: str) -> str:
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


class FolderSource(Source):
    """A local folder or git repository. Files are read in line chunks; nothing outside the folder is read:
    the folder itself must be one the policy allows, scopes with ``..`` or absolute paths are refused, and a
    file whose real path leaves the folder or the policy (a symlink, even one planted after the source was
    configured) is skipped. The revision is the HEAD commit when the folder is in a git work tree, else a
    hash of the files."""

    kind = "folder"
    config_keys = Source.config_keys | {"path", "chunk_lines", "max_file_bytes", "exclude"}
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
            _check_scope_pattern(scope)
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
    ) -> Source:
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
        checked = [_check_scope_pattern(scope) for scope in self._check_scopes(scopes)]
        for relative, path in self._files():
            if any(path_in_scope(relative, scope) for scope in checked):
                yield relative, path

    def read(self, relative: str) -> str:
        """The text of one file by its path relative to the folder, refusing any escape."""
        cleaned = _check_scope_pattern(relative)
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
        limit = self._check_limit(limit)
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
                labels=_label(piece, trust),
            )
            for _score, _relative, _position, locator, subject, piece in scored[:limit]
        ]


# --- docs -------------------------------------------------------------------------------------------------

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def _slug(title: str) -> str:
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title.casefold()).strip()) or "section"


def split_markdown(text: str) -> list[tuple[tuple[str, ...], str]]:
    """Split Markdown into (heading path, section text) by ATX and setext headings. Headings inside fenced
    code blocks and YAML front matter are ignored; text before the first heading has an empty path."""
    lines = text.splitlines(keepends=True)
    sections: list[tuple[tuple[str, ...], list[str]]] = [((), [])]
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    index = 0
    if lines and lines[0].rstrip("\r\n") == "---":  # front matter stays in the preamble
        closing = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r\n") in ("---", "...")), None)
        if closing is not None:
            sections[0][1].extend(lines[: closing + 1])
            index = closing + 1
    while index < len(lines):
        line = lines[index]
        stripped = line.rstrip("\r\n")
        fence_match = _FENCE.match(stripped)
        heading: tuple[int, str] | None = None
        consumed = 1
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
        elif fence is None:
            atx = _ATX_HEADING.match(stripped)
            following = lines[index + 1].rstrip("\r\n") if index + 1 < len(lines) else ""
            previous_blank = (
                index == 0
                or not lines[index - 1].strip()
                or bool(sections[-1][0] and len(sections[-1][1]) <= 2)
            )
            if atx:
                heading = (len(atx.group(1)), atx.group(2).strip())
            elif (
                stripped.strip()
                and _SETEXT.match(following)
                and previous_blank
                and not stripped.lstrip().startswith(("-", "*", "+", ">", "|", "    "))
            ):
                heading = (1 if following.strip().startswith("=") else 2, stripped.strip())
                consumed = 2
        chunk = lines[index : index + consumed]
        if heading is not None:
            level, title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append((tuple(t for _, t in stack), list(chunk)))
        else:
            sections[-1][1].extend(chunk)
        index += consumed
    return [(path, "".join(body)) for path, body in sections]


class DocsSource(FolderSource):
    """A documentation folder of Markdown: one item per section, subject = heading path (``A > B > C``)."""

    kind = "docs"
    markdown_suffixes = (".md", ".markdown", ".mdx")

    def _files(self) -> Iterator[tuple[str, Path]]:
        for relative, path in super()._files():
            if relative.lower().endswith(self.markdown_suffixes):
                yield relative, path

    def _sections(self, relative: str, text: str) -> Iterator[tuple[str, str, str]]:
        seen: dict[str, int] = {}
        for heading_path, body in split_markdown(text):
            lines = body.splitlines()
            content = lines[1:] if heading_path else lines
            if not "".join(content).strip():
                continue  # a heading with nothing under it, or blank preamble
            anchor = _slug(heading_path[-1]) if heading_path else "preamble"
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            if count:
                anchor = f"{anchor}-{count}"
            subject = " > ".join(heading_path) if heading_path else relative
            yield f"{relative}#{anchor}", subject, body


# --- tickets ----------------------------------------------------------------------------------------------


def _parse_time(value: Any, clock: Clock) -> datetime:
    """When a record says its content was observed (never later than now), else now."""
    now = clock()
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return min(parsed, now)
    return now


def _record_claim(record: Mapping[str, Any]) -> tuple[TrustClass | None, str | None]:
    claimed = record.get("trust_class")
    signature = record.get("signature")
    trust = None
    if isinstance(claimed, str):
        try:
            trust = TrustClass.parse(claimed)
        except ValidationFailed:
            trust = None
    return trust, signature if isinstance(signature, str) else None


class TicketsJsonSource(Source):
    """A JSON file of tickets: a list, or ``{"tickets": [...]}``. Each ticket: ``id`` (required), ``title``,
    ``body`` or ``description``, ``status``, ``labels``, ``project``, ``updated_at`` (ISO, used as
    observed-at), optional ``subject`` (default ``ticket:<id>``), ``text`` (else title + body + status),
    ``trust_class`` and ``signature``. Scopes: ``*``, ``project:<p>``, ``label:<l>``, ``status:<s>``."""

    kind = "tickets_json"
    allowed_trust = frozenset(
        {TrustClass.untrusted_retrieved, TrustClass.repository_authored, TrustClass.signed_skill,
         TrustClass.signed_policy}
    )  # fmt: skip
    config_keys = Source.config_keys | {"path", "max_bytes"}

    def __init__(
        self,
        name: str,
        path: str | os.PathLike[str],
        *,
        policy: SourcePolicy,
        max_bytes: int = 8 * 1024 * 1024,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.policy = policy
        self.path = policy.confine_path(path, option="path", as_folder=False)
        self.written_by(policy.writer_of(self.path))
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationFailed("max_bytes must be a positive integer", field="max_bytes")
        self.max_bytes = max_bytes

    @classmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> Source:
        options = cls.common_options(config, default_freshness=Freshness(track_revision=True))
        if not isinstance(config.get("path"), str):
            raise ValidationFailed("a tickets_json source needs a path", field="path")
        extra = {"max_bytes": config["max_bytes"]} if "max_bytes" in config else {}
        return cls(name, config["path"], policy=policy, clock=clock, **extra, **options)

    def _read(self) -> bytes:
        """The file's bytes, read only where the policy allows (checked on the file actually opened)."""
        try:
            with self.policy.open_file(self.path) as handle:
                data = handle.read(self.max_bytes + 1)
        except ConfinementRefused as refusal:
            raise SourceRefused(self.name, str(refusal)) from None
        except OSError as exc:
            raise SourceUnavailable(
                self.name, f"cannot read {self.path.name}: {exc.strerror or exc}"
            ) from exc
        if len(data) > self.max_bytes:
            raise SourceResponseRejected(
                self.name, f"{self.path.name} exceeds {self.max_bytes} bytes", kind="too_large"
            )
        return data

    def _load(self) -> tuple[bytes, list[dict[str, Any]]]:
        data = self._read()
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise SourceResponseRejected(self.name, f"{self.path.name} is not valid JSON: {exc}") from exc
        tickets = document.get("tickets") if isinstance(document, dict) else document
        if not isinstance(tickets, list):
            raise SourceResponseRejected(self.name, 'expected a list of tickets or {"tickets": [...]}')
        return data, [t for t in tickets if isinstance(t, dict) and t.get("id") not in (None, "")]

    def current_revision(self) -> str | None:
        try:
            return "sha256:" + sha256_hex(self._read())
        except SourceFailure:
            return None

    @staticmethod
    def _in_scope(ticket: Mapping[str, Any], scope: str) -> bool:
        if scope == ANY_SCOPE:
            return True
        kind, _, value = scope.partition(":")
        labels = ticket.get("labels") or []
        if kind == "label":
            return isinstance(labels, list) and value in labels
        if kind == "status":
            return str(ticket.get("status", "")) == value
        if kind == "project":
            return str(ticket.get("project", "")) == value
        return False

    @staticmethod
    def ticket_text(ticket: Mapping[str, Any]) -> str:
        if isinstance(ticket.get("text"), str):
            return ticket["text"]
        parts = [
            str(ticket.get("title") or "").strip(),
            str(ticket.get("body") or ticket.get("description") or ""),
        ]
        if ticket.get("status"):
            parts.append(f"Status: {ticket['status']}")
        return "\n\n".join(part for part in parts if part.strip())

    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        limit = self._check_limit(limit)
        checked = self._check_scopes(scopes)
        data, tickets = self._load()
        revision = "sha256:" + sha256_hex(data)
        terms = query_terms(query or "")
        scored = []
        for ticket in tickets:
            if not any(self._in_scope(ticket, scope) for scope in checked):
                continue
            text = self.ticket_text(ticket)
            if not text.strip():
                continue
            ticket_id = str(ticket["id"])
            score = match_score(terms, text, bonus_text=ticket_id)
            if terms and score == 0:
                continue
            scored.append((-score, ticket_id, ticket, text))
        scored.sort(key=lambda entry: (entry[0], entry[1]))
        items = []
        for _score, ticket_id, ticket, text in scored[:limit]:
            claimed, signature = _record_claim(ticket)
            trust = min(claimed, self.highest_trust) if claimed is not None else self.highest_trust
            subject = (
                ticket.get("subject") if isinstance(ticket.get("subject"), str) else f"ticket:{ticket_id}"
            )
            items.append(
                RetrievedItem(
                    source=self.name,
                    locator=f"{self.path.name}#{ticket_id}",
                    revision=revision,
                    text=text,
                    trust_class=claimed if claimed is not None else self.highest_trust,
                    observed_at=_parse_time(ticket.get("updated_at"), self.clock),
                    subject=subject,
                    claim=ticket["claim"] if isinstance(ticket.get("claim"), str) else "",
                    signature=signature,
                    labels=_label(text, trust),
                )
            )
        return items


# --- http_json --------------------------------------------------------------------------------------------


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address the policy vetted (``vetted_address``) instead of resolving the host again,
    so the name cannot resolve to another address between the check and the connection (DNS rebinding).
    The Host header and, for HTTPS, the TLS server name stay the URL's host."""

    vetted_address = ""

    def connect(self) -> None:
        self.sock = socket.create_connection((self.vetted_address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class PinnedHTTPSConnection(http.client.HTTPSConnection, PinnedHTTPConnection):
    """HTTPS over the vetted address: ``HTTPSConnection.connect`` wraps the socket the pinned connect made."""


class HttpJsonSource(Source):
    """A JSON endpoint returning a list of ``{subject, text, locator?|url?|id?, claim?, observed_at?}`` (or
    ``{"items": [...]}``). Always ``untrusted_retrieved``. GET ``url?q=<query>&limit=<n>&scope=<s>…`` with a
    total deadline of ``timeout`` seconds and a cap of ``max_bytes`` on the body; a timeout or a connection
    error raises ``SourceUnavailable``, an oversize or malformed body ``SourceResponseRejected``.

    The host must be on the policy's allowlist when the source is configured, and every request (each
    redirect hop too, at most ``max_redirects``) goes to an address the policy vets at that moment; a host or
    address it refuses raises ``SourceRefused`` before any connection is made."""

    kind = "http_json"
    allowed_trust = frozenset({TrustClass.untrusted_retrieved})
    default_trust = TrustClass.untrusted_retrieved
    config_keys = Source.config_keys | {"url", "timeout", "max_bytes"}
    max_timeout = 60.0
    max_redirects = 3
    redirect_statuses = frozenset({301, 302, 303, 307, 308})

    def __init__(
        self,
        name: str,
        url: str,
        *,
        policy: SourcePolicy,
        timeout: float = 5.0,
        max_bytes: int = 1024 * 1024,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        policy.check_url(url, option="url")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= self.max_timeout
        ):
            raise ValidationFailed(
                f"timeout must be a number of seconds in (0, {self.max_timeout:g}]", field="timeout"
            )
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationFailed("max_bytes must be a positive integer", field="max_bytes")
        self.policy = policy
        self.url = url
        self.timeout = float(timeout)
        self.max_bytes = max_bytes

    @classmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> Source:
        options = cls.common_options(config, default_freshness=Freshness(ttl_seconds=3600))
        extra = {key: config[key] for key in ("timeout", "max_bytes") if key in config}
        return cls(name, config.get("url"), policy=policy, clock=clock, **extra, **options)  # type: ignore[arg-type]

    def _request_url(self, query: str, scopes: Sequence[str], limit: int) -> str:
        params = [("q", query), ("limit", str(limit))] + [("scope", scope) for scope in scopes]
        parts = urllib.parse.urlsplit(self.url)
        joined = "&".join(filter(None, [parts.query, urllib.parse.urlencode(params)]))
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, joined, parts.fragment))

    def _timed_out(self) -> SourceUnavailable:
        return SourceUnavailable(self.name, f"timed out after {self.timeout:g}s", kind="timeout")

    def _get(self, url: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        for hop in range(self.max_redirects + 1):
            body, location = self._get_once(url, deadline, redirected=hop > 0)
            if location is None:
                return body
            url = location
        raise SourceResponseRejected(self.name, f"more than {self.max_redirects} redirects")

    def _get_once(self, url: str, deadline: float, *, redirected: bool) -> tuple[bytes, str | None]:
        """One GET: the body, or the absolute URL a redirect points to (the next hop is vetted in turn)."""
        parts = urllib.parse.urlsplit(url)
        try:
            if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
                raise ConfinementRefused("only http(s) URLs are followed")
            port = parts.port or DEFAULT_PORTS[parts.scheme]
            address = self.policy.connect_address(parts.hostname, port)
        except ConfinementRefused as refusal:
            raise SourceRefused(self.name, f"{'redirect refused: ' if redirected else ''}{refusal}") from None
        except (OSError, ValueError):
            raise SourceUnavailable(self.name, f"cannot resolve {parts.hostname}") from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timed_out()
        connection_class = PinnedHTTPSConnection if parts.scheme == "https" else PinnedHTTPConnection
        connection = connection_class(parts.hostname, port, timeout=remaining)
        connection.vetted_address = address
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        try:
            try:
                connection.request("GET", target, headers={"Accept": "application/json"})
                response = connection.getresponse()
            except TimeoutError:
                raise self._timed_out() from None
            except (OSError, http.client.HTTPException):
                # One message for every way a connection fails: it never tells open from closed ports.
                raise SourceUnavailable(self.name, f"cannot connect to {parts.hostname}:{port}") from None
            if response.status in self.redirect_statuses:
                location = response.getheader("Location")
                if not location:
                    raise SourceResponseRejected(self.name, f"HTTP {response.status} without a Location")
                return b"", urllib.parse.urljoin(url, location)
            if response.status >= 400:
                kind = "unreachable" if response.status >= 500 else "error"
                raise SourceUnavailable(self.name, f"HTTP {response.status} {response.reason}", kind=kind)
            return self._read_body(response, deadline), None
        finally:
            connection.close()

    def _read_body(self, response: http.client.HTTPResponse, deadline: float) -> bytes:
        length = response.getheader("Content-Length")
        if length and length.isdigit() and int(length) > self.max_bytes:
            raise SourceResponseRejected(
                self.name, f"response of {length} bytes exceeds the cap of {self.max_bytes}", kind="too_large"
            )
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise self._timed_out()
                chunk = response.read(min(65536, self.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes:
                    raise SourceResponseRejected(
                        self.name, f"response exceeds the cap of {self.max_bytes} bytes", kind="too_large"
                    )
        except TimeoutError:
            raise self._timed_out() from None
        except (OSError, http.client.HTTPException) as exc:
            raise SourceUnavailable(self.name, f"cannot read the response: {exc}") from None
        return b"".join(chunks)

    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        limit = self._check_limit(limit)
        checked = self._check_scopes(scopes)
        body = self._get(self._request_url(query or "", checked, limit))
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise SourceResponseRejected(self.name, f"response is not valid JSON: {exc}") from exc
        records = document.get("items") if isinstance(document, dict) else document
        if not isinstance(records, list):
            raise SourceResponseRejected(self.name, 'expected a JSON list or {"items": [...]}')
        trust = self.highest_trust
        items: list[RetrievedItem] = []
        for index, record in enumerate(records):
            if len(items) >= limit:
                break
            if (
                not isinstance(record, dict)
                or not isinstance(record.get("text"), str)
                or not record["text"].strip()
            ):
                continue
            scope = record.get("scope")
            if isinstance(scope, str) and ANY_SCOPE not in checked and scope not in checked:
                continue  # the endpoint answered outside the authorized scopes: drop it
            locator = next(
                (str(record[key]) for key in ("locator", "url", "id") if record.get(key) not in (None, "")),
                f"{self.url}#{index}",
            )
            subject = record.get("subject") if isinstance(record.get("subject"), str) else None
            claimed, signature = _record_claim(record)
            items.append(
                RetrievedItem(
                    source=self.name,
                    locator=locator,
                    revision=None,
                    text=record["text"],
                    trust_class=claimed if claimed is not None else trust,
                    observed_at=_parse_time(record.get("observed_at"), self.clock),
                    subject=subject,
                    claim=record["claim"] if isinstance(record.get("claim"), str) else "",
                    signature=signature,
                    labels=_label(record["text"], trust),
                )
            )
        return items


for _cls in (FolderSource, DocsSource, TicketsJsonSource, HttpJsonSource):
    register_source_kind(_cls.kind, _cls)
