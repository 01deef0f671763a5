"""``CheckRunner``: the gate's ``run_check`` for every check kind, and the core's ``CheckContext`` and
``PreflightContext`` ports (``nexum/core/verification/checks/base.py``) backed by the sandbox."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping

from nexum.adapters.sandbox.commands import run_command
from nexum.adapters.sandbox.executables import resolve_executable
from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.adapters.sandbox.workspace import open_in_workspace, read_bounded, resolve_in_workspace
from nexum.core.verification.checks.base import CheckResult, CheckSpec
from nexum.core.verification.checks.command import CommandCheck

ArtifactLoader = Callable[[str], bytes | str | None]
RegisteredCallable = Callable[[], bool]


class CheckRunner:
    """Runs any check kind: an instance is the ``run_check`` that ``gate_task_completion`` takes, and the
    ``CheckContext`` and ``PreflightContext`` the check kinds reach the project through (their
    ``run``/``evaluate`` and ``preflight``).

    ``artifact_loader(digest)`` returns an artifact's content, or None when there is none.
    ``callables`` maps a ``CallableCheck.dotted_path`` to the function to call: only functions the library
    user registered here can run (a contract cannot name arbitrary code).
    ``on_start`` is passed to ``run_command`` for every command check.
    """

    def __init__(
        self,
        policy: SandboxPolicy,
        *,
        artifact_loader: ArtifactLoader | None = None,
        callables: Mapping[str, RegisteredCallable] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> None:
        self.policy = policy
        self.artifact_loader = artifact_loader
        self.callables = dict(callables or {})
        self.on_start = on_start

    def __call__(self, check: CheckSpec) -> CheckResult:
        return check.run(self)

    # --- CheckContext ---

    def run_command(self, check: CommandCheck) -> CheckResult:
        return run_command(check, self.policy, on_start=self.on_start)

    def require_workspace_file(self, path: str) -> None:
        os.close(open_in_workspace(self.policy, path, os.O_PATH))

    def read_workspace_file(self, path: str) -> bytes | None:
        fd = open_in_workspace(self.policy, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return read_bounded(fd, self.policy.max_read_bytes)
        finally:
            os.close(fd)

    def load_artifact(self, digest: str) -> bytes | None:
        if self.artifact_loader is None:
            raise RuntimeError("no artifact store is configured for artifact checks")
        artifact = self.artifact_loader(digest)
        if isinstance(artifact, str):
            artifact = artifact.encode("utf-8")
        return None if artifact is None else artifact[: self.policy.max_read_bytes]

    def registered_callable(self, dotted_path: str) -> RegisteredCallable | None:
        return self.callables.get(dotted_path)

    # --- PreflightContext ---

    @property
    def workspace_root(self) -> str:
        return str(self.policy.workspace_root)

    def resolve_in_workspace(self, relative: str) -> str:
        return resolve_in_workspace(self.policy, relative)

    def resolve_executable(self, program: str, *, cwd: str) -> str:
        return resolve_executable(self.policy, program, cwd=cwd, search_path=self.policy.child_env()["PATH"])
