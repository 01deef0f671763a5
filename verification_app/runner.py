"""The check runner as configured by the operator: the sandbox policy from settings, the project's artifacts,
and the Python callables a library user registered.

Settings (read on every call, so an operator's change applies to the next run):
``NEXUM_WORKSPACE_ROOT``, ``NEXUM_CHECK_EXECUTABLES`` (the allowlist, SPEC V8), ``NEXUM_CHECK_ENV_ALLOWLIST``,
``NEXUM_CHECK_MAX_TIMEOUT_S``, ``NEXUM_CHECK_MAX_OUTPUT_BYTES``, ``NEXUM_CHECK_CPU_SECONDS``,
``NEXUM_CHECK_ADDRESS_SPACE_BYTES``, ``NEXUM_CHECK_MAX_PROCESSES``, ``NEXUM_CHECK_MAX_FILE_SIZE_BYTES`` and
``NEXUM_CHECK_CALLABLES`` (dotted paths the operator allows callable checks to import).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.utils.module_loading import import_string

from context_app.artifacts import default_store
from context_app.models import WorldItem
from nexum.core.errors import NotFound, PolicyRefused, ValidationFailed
from nexum.core.gate import DENIED_EXECUTABLE, WORKSPACE_VIOLATION, CheckSpec, CommandCheck
from nexum.sandbox import CheckRunner, SandboxPolicy, resolve_executable, resolve_in_workspace

_callables: dict[str, Callable[[], bool]] = {}
_callables_lock = threading.Lock()


def register_check_callable(dotted_path: str, function: Callable[[], bool]) -> None:
    """Make ``function`` runnable by callable checks naming ``dotted_path`` (library users, in process).

    A contract can only name a callable; it never makes the runner import anything it names (SPEC V8).
    """
    if not callable(function):
        raise TypeError("a check callable must be callable")
    with _callables_lock:
        _callables[dotted_path] = function


def unregister_check_callable(dotted_path: str) -> None:
    with _callables_lock:
        _callables.pop(dotted_path, None)


def registered_callables() -> dict[str, Callable[[], bool]]:
    """In-process registrations, then the operator's ``NEXUM_CHECK_CALLABLES`` (imported on use)."""
    found: dict[str, Callable[[], bool]] = {}
    for path in settings.NEXUM_CHECK_CALLABLES:
        found[path] = _lazy_import(path)
    with _callables_lock:
        found.update(_callables)
    return found


def _lazy_import(path: str) -> Callable[[], bool]:
    def call() -> bool:
        function = import_string(path.replace(":", "."))
        return function()  # type: ignore[no-any-return]

    return call


def sandbox_policy() -> SandboxPolicy:
    root = Path(settings.NEXUM_WORKSPACE_ROOT).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return SandboxPolicy(
        workspace_root=root,
        allowed_executables=frozenset(settings.NEXUM_CHECK_EXECUTABLES),
        env_allowlist=frozenset(settings.NEXUM_CHECK_ENV_ALLOWLIST),
        cpu_seconds=settings.NEXUM_CHECK_CPU_SECONDS,
        address_space_bytes=settings.NEXUM_CHECK_ADDRESS_SPACE_BYTES,
        max_processes=settings.NEXUM_CHECK_MAX_PROCESSES,
        max_file_size_bytes=settings.NEXUM_CHECK_MAX_FILE_SIZE_BYTES,
        max_output_bytes=settings.NEXUM_CHECK_MAX_OUTPUT_BYTES,
        max_timeout_s=settings.NEXUM_CHECK_MAX_TIMEOUT_S,
    )


def artifact_loader(project_id: str) -> Callable[[str], bytes | None]:
    """Reads an artifact by digest, only if an artifact with that content was recorded in the project:
    a contract cannot probe another project's content by guessing its digest."""

    def load(digest: str) -> bytes | None:
        if not WorldItem.objects.filter(
            project_id=project_id, kind="artifact", content_sha256=digest
        ).exists():
            return None
        try:
            return default_store().read(digest)
        except (NotFound, ValidationFailed):
            return None

    return load


def check_runner(project_id: str, *, on_start: Callable[[int], None] | None = None) -> CheckRunner:
    """The runner for one project's checks; ``on_start(pid)`` hears of every command check the sandbox
    starts (the worker's lease records it)."""
    return CheckRunner(
        sandbox_policy(),
        artifact_loader=artifact_loader(project_id),
        callables=registered_callables(),
        on_start=on_start,
    )


def refuse_unrunnable(check: CheckSpec, field: str) -> None:
    """At registration: refuse a command check whose working directory leaves the workspace root or whose
    executable is not on the allowlist (both are checked again when the check runs)."""
    if not isinstance(check, CommandCheck):
        return
    policy = sandbox_policy()
    try:
        cwd = resolve_in_workspace(policy, check.cwd)
    except Exception as refusal:  # the sandbox's refusal carries the reason code
        if getattr(refusal, "reason", None) == WORKSPACE_VIOLATION:
            raise WorkspaceViolation(str(refusal), field=f"{field}.cwd") from None
        raise
    if not os.path.isdir(cwd):
        cwd = str(policy.workspace_root)  # may be created later; the run refuses it if it still is not
    try:
        resolve_executable(policy, check.argv[0], cwd=cwd, search_path=policy.child_env()["PATH"])
    except Exception as refusal:
        if getattr(refusal, "reason", None) == DENIED_EXECUTABLE:
            raise DeniedExecutable(str(refusal), field=f"{field}.argv[0]") from None
        # missing: allowed now, may be installed before the run (which records missing_executable)


class WorkspaceViolation(PolicyRefused):
    code = "workspace_violation"


class DeniedExecutable(PolicyRefused):
    code = "denied_executable"
