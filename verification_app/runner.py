"""The check runner as configured by the operator: the project's sandbox policy from settings, the project's
artifacts, and the Python callables a library user registered.

Settings (read on every call, so an operator's change applies to the next run):
``NEXUM_WORKSPACE_ROOT`` (each project's checks run in ``<root>/<project slug>``), ``NEXUM_SANDBOX``,
``NEXUM_SANDBOX_RO_PATHS``, ``NEXUM_SANDBOX_CGROUP``, ``NEXUM_SANDBOX_HOST_UID`` and ``_GID``,
``NEXUM_CHECK_EXECUTABLES`` (the allowlist, SPEC V8),
``NEXUM_CHECK_ENV_ALLOWLIST``, ``NEXUM_CHECK_MAX_TIMEOUT_S``, ``NEXUM_CHECK_MAX_OUTPUT_BYTES``,
``NEXUM_CHECK_CPU_SECONDS``, ``NEXUM_CHECK_ADDRESS_SPACE_BYTES``, ``NEXUM_CHECK_MAX_PROCESSES``,
``NEXUM_CHECK_MAX_FILE_SIZE_BYTES``, ``NEXUM_CHECK_TMP_BYTES`` and ``NEXUM_CHECK_CALLABLES`` (dotted paths
the operator allows callable checks to import).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.utils.module_loading import import_string

from context_app.world.artifacts import default_store
from context_app.world.models import WorldItem
from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.adapters.sandbox.runner import CheckRunner
from nexum.adapters.workspaces import project_workspace
from nexum.core.errors import NotFound, ValidationFailed
from tasks_app import selectors as task_selectors

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


def workspace_folder(project_id: str) -> Path:
    """The project's own workspace folder (``nexum.adapters.workspaces.project_workspace``), created when
    missing: its checks run there and see no other project's folder. A root worker's sandboxes run as the
    unprivileged ``NEXUM_SANDBOX_HOST_UID``, which must be able to write it: the folder is given to that
    user."""
    project = task_selectors.project_get(project_id=project_id)
    folder = project_workspace(project.slug).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    owner = (settings.NEXUM_SANDBOX_HOST_UID, settings.NEXUM_SANDBOX_HOST_GID)
    if os.geteuid() == 0 and None not in owner:
        found = folder.stat()
        if (found.st_uid, found.st_gid) != owner:
            os.chown(folder, *owner)
    return folder


def sandbox_policy(project_id: str) -> SandboxPolicy:
    return SandboxPolicy(
        workspace_root=workspace_folder(project_id),
        allowed_executables=frozenset(settings.NEXUM_CHECK_EXECUTABLES),
        env_allowlist=frozenset(settings.NEXUM_CHECK_ENV_ALLOWLIST),
        cpu_seconds=settings.NEXUM_CHECK_CPU_SECONDS,
        address_space_bytes=settings.NEXUM_CHECK_ADDRESS_SPACE_BYTES,
        max_processes=settings.NEXUM_CHECK_MAX_PROCESSES,
        max_file_size_bytes=settings.NEXUM_CHECK_MAX_FILE_SIZE_BYTES,
        max_output_bytes=settings.NEXUM_CHECK_MAX_OUTPUT_BYTES,
        max_timeout_s=settings.NEXUM_CHECK_MAX_TIMEOUT_S,
        isolation=settings.NEXUM_SANDBOX,
        read_only_paths=tuple(settings.NEXUM_SANDBOX_RO_PATHS),
        hidden_paths=hidden_paths(),
        private_paths=frozenset({str(settings.BASE_DIR), str(Path.home())}),
        cgroup_parent=settings.NEXUM_SANDBOX_CGROUP,
        tmp_bytes=settings.NEXUM_CHECK_TMP_BYTES,
        host_uid=settings.NEXUM_SANDBOX_HOST_UID,
        host_gid=settings.NEXUM_SANDBOX_HOST_GID,
    )


def hidden_paths() -> frozenset[str]:
    """What no check may see: the data directory, the artifact store, the SQLite file and the workspace root
    (each project's folder is mounted on its own)."""
    paths = {settings.DATA_DIR, settings.NEXUM_ARTIFACT_ROOT, settings.NEXUM_WORKSPACE_ROOT}
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        paths |= {database["NAME"], database.get("TEST", {}).get("NAME") or database["NAME"]}
    return frozenset(str(Path(path).resolve()) for path in paths)


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
        sandbox_policy(project_id),
        artifact_loader=artifact_loader(project_id),
        callables=registered_callables(),
        on_start=on_start,
    )
