"""What the operator allows one project's checks: ``SandboxPolicy``, its defaults and the scrubbed environment
it gives a check (item 3 of the package docstring)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nexum.core.errors import ValidationFailed

DEFAULT_ENV_ALLOWLIST: Final = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TZ"})
FALLBACK_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
# How many bytes are read at once: from a file, from the output pipe, from bubblewrap's info descriptor.
READ_CHUNK: Final = 65536
BWRAP: Final = "bwrap"
UNSANDBOXED: Final = "none"
ISOLATIONS: Final = (BWRAP, UNSANDBOXED)
# The user and group a root worker's sandboxes run as on the host: nobody and nogroup, which every Linux
# system reserves for "owns nothing" and which no service's files belong to (an operator may pick a uid of
# its own: NEXUM_SANDBOX_HOST_UID, NEXUM_SANDBOX_HOST_GID).
DEFAULT_HOST_ID: Final = 65534


# A check judges the files as they are now: cached bytecode whose source changed within the same second and
# kept its size would be run instead of the new source, so a fixed test could still fail (or the reverse).
DEFAULT_ENV_SET = {"PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class SandboxPolicy:
    """Operator-set limits for one project's checks (SPEC V8). ``None`` disables a resource limit.

    ``workspace_root`` is the project's own folder. ``allowed_executables`` holds bare names (matched against
    argv[0] as typed, found on the scrubbed PATH) and absolute paths (matched against the resolved path or its
    realpath, the entry resolved too: an entry allows the file it names, by any path). ``max_output_bytes``
    and ``max_timeout_s`` cap what a check asks for; ``max_read_bytes`` caps how much of a file or artifact a
    pattern check reads. ``isolation`` is ``bwrap`` or ``none``; ``read_only_paths`` are extra host paths
    every check sees read-only; ``hidden_paths`` and ``private_paths`` are what no mount may show (see
    ``bubblewrap.plan_mounts``); ``cgroup_parent`` is the pids cgroup folder for a root worker (None: found
    automatically); ``tmp_bytes`` sizes the private /tmp; ``host_uid`` and ``host_gid`` are the unprivileged
    host user a root worker runs its sandboxes as (None: it has none, and refuses command checks).
    """

    workspace_root: Path
    allowed_executables: frozenset[str] = frozenset()
    env_allowlist: frozenset[str] = DEFAULT_ENV_ALLOWLIST
    env_set: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV_SET))
    cpu_seconds: int | None = 300
    address_space_bytes: int | None = 4 * 1024**3
    max_processes: int | None = 256
    max_file_size_bytes: int | None = 256 * 1024**2
    max_output_bytes: int = 1024 * 1024
    max_timeout_s: float = 3600.0
    max_read_bytes: int = 16 * 1024 * 1024
    isolation: str = BWRAP
    read_only_paths: tuple[str, ...] = ()
    hidden_paths: frozenset[str] = frozenset()
    private_paths: frozenset[str] = frozenset()
    cgroup_parent: str | None = None
    tmp_bytes: int | None = 256 * 1024**2
    host_uid: int | None = DEFAULT_HOST_ID
    host_gid: int | None = DEFAULT_HOST_ID

    def __post_init__(self) -> None:
        root = Path(self.workspace_root)
        if not root.is_absolute():
            raise ValidationFailed("workspace_root must be an absolute path", field="workspace_root")
        object.__setattr__(self, "workspace_root", root)
        allowed = frozenset(self.allowed_executables)
        for entry in allowed:
            if not isinstance(entry, str) or not entry or "\x00" in entry:
                raise ValidationFailed(f"bad allowlist entry {entry!r}", field="allowed_executables")
            if "/" in entry and not os.path.isabs(entry):
                raise ValidationFailed(
                    f"allowlist entry {entry!r} must be a bare name or an absolute path",
                    field="allowed_executables",
                )
        object.__setattr__(self, "allowed_executables", allowed)
        object.__setattr__(self, "env_allowlist", frozenset(self.env_allowlist))
        object.__setattr__(self, "env_set", dict(self.env_set))
        limits = (
            "cpu_seconds",
            "address_space_bytes",
            "max_processes",
            "max_file_size_bytes",
            "tmp_bytes",
            "host_uid",
            "host_gid",
        )
        for name in limits:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValidationFailed(f"{name} must be a positive integer or None", field=name)
        for name in ("max_output_bytes", "max_read_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationFailed(f"{name} must be a positive integer", field=name)
        if not self.max_timeout_s > 0:
            raise ValidationFailed("max_timeout_s must be positive", field="max_timeout_s")
        if self.isolation not in ISOLATIONS:
            raise ValidationFailed(
                f"isolation must be one of {', '.join(ISOLATIONS)}, not {self.isolation!r}", field="isolation"
            )
        for name in ("read_only_paths", "hidden_paths", "private_paths"):
            paths = getattr(self, name)
            if any(not os.path.isabs(path) for path in paths):
                raise ValidationFailed(f"{name} must hold absolute paths", field=name)
        object.__setattr__(self, "read_only_paths", tuple(self.read_only_paths))
        object.__setattr__(self, "hidden_paths", frozenset(self.hidden_paths))
        object.__setattr__(self, "private_paths", frozenset(self.private_paths))

    def child_env(self) -> dict[str, str]:
        """The scrubbed environment: allowlisted parent variables, then ``env_set``; PATH always sane."""
        env = {name: os.environ[name] for name in self.env_allowlist if name in os.environ}
        env.update(self.env_set)
        env["PATH"] = _sanitized_path(env.get("PATH", FALLBACK_PATH))
        return env


def _sanitized_path(path: str) -> str:
    entries = [entry for entry in path.split(os.pathsep) if os.path.isabs(entry)]
    return os.pathsep.join(entries) or FALLBACK_PATH
