"""``manage.py check`` (and every server start) says when command checks cannot run as configured:
bubblewrap missing or unusable, a root worker without a pids cgroup for its process limit or without an
unprivileged host user to run checks as (or one that cannot read the allowlisted executables), or no
sandbox."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from nexum.adapters.sandbox.policy import ISOLATIONS, UNSANDBOXED, SandboxPolicy
from nexum.adapters.sandbox.probe import sandbox_unavailable
from nexum.core.errors import ValidationFailed
from verification_app.runner import hidden_paths


@register("sandbox")
def sandbox_ready(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if settings.NEXUM_SANDBOX not in ISOLATIONS:
        return [
            Error(
                f"NEXUM_SANDBOX is {settings.NEXUM_SANDBOX!r}",
                hint=f"set it to one of: {', '.join(ISOLATIONS)}",
                id="nexum.E004",
            )
        ]
    if settings.NEXUM_SANDBOX == UNSANDBOXED:
        return [
            Warning(
                "NEXUM_SANDBOX=none: command checks run unsandboxed, seeing the worker's files and network",
                hint="for a development machine only; install bubblewrap and unset NEXUM_SANDBOX elsewhere",
                id="nexum.W002",
            )
        ]
    try:
        policy = SandboxPolicy(
            workspace_root=settings.NEXUM_WORKSPACE_ROOT.resolve(),
            max_processes=settings.NEXUM_CHECK_MAX_PROCESSES,
            isolation=settings.NEXUM_SANDBOX,
            hidden_paths=hidden_paths(),
            allowed_executables=frozenset(settings.NEXUM_CHECK_EXECUTABLES),
            read_only_paths=tuple(settings.NEXUM_SANDBOX_RO_PATHS),
            cgroup_parent=settings.NEXUM_SANDBOX_CGROUP,
            host_uid=settings.NEXUM_SANDBOX_HOST_UID,
            host_gid=settings.NEXUM_SANDBOX_HOST_GID,
        )
    except ValidationFailed as problem:
        return [Error(str(problem), id="nexum.E005")]
    problem = sandbox_unavailable(policy)
    if problem is None:
        return []
    return [
        Warning(
            f"command checks will fail with sandbox_unavailable: {problem}",
            hint="see the README's Sandbox section",
            id="nexum.W001",
        )
    ]
