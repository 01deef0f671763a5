"""A worker of its own for tests/unit/test_sandbox.py: runs one command check, prints the result as JSON.

``python sandbox_worker.py '<request>'``, the request holding ``paths`` (put first on sys.path: the
repository, and what it imports), ``workspace``, ``allowed``, ``argv``, ``max_processes`` and ``isolation``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

request = json.loads(sys.argv[1])
sys.path[:0] = request["paths"]

from nexum.adapters.sandbox.commands import run_command  # noqa: E402
from nexum.adapters.sandbox.policy import SandboxPolicy  # noqa: E402
from nexum.core.verification.checks.command import CommandCheck  # noqa: E402  (after the paths above

policy = SandboxPolicy(
    workspace_root=Path(request["workspace"]),
    allowed_executables=frozenset(request["allowed"]),
    max_processes=request["max_processes"],
    isolation=request["isolation"],
)
result = run_command(CommandCheck(name="worker", argv=tuple(request["argv"])), policy)
print(json.dumps({"uid": os.geteuid(), "reason": result.reason, "output": result.output}))
