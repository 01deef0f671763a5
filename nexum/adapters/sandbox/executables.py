"""Which program a command check may start (item 2 of the package docstring): the allowlist, vetted before
anything runs.

A bare name (``pytest``) is looked up with ``shutil.which`` on the scrubbed PATH (empty and relative PATH
entries dropped); a name with a slash is a path, relative to the resolved cwd. It is allowed when

- the allowlist holds the bare name as typed and the name was found on PATH (a path such as ``./echo`` is
  never allowed by the bare-name entry ``echo``), or
- the allowlist holds an absolute path that names the same file: the found path (normalized) or its
  ``realpath`` equals the entry or the entry's ``realpath``, both sides resolved, so ``venv/bin/python3``
  is allowed by ``venv/bin/python`` when both are links to one interpreter. An entry allows the file it
  resolves to by whatever path a check names it (the entries are resolved at each check: a link an
  operator repoints moves the allowance with it).
"""

from __future__ import annotations

import os
import shutil

from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.core.verification.checks.base import DENIED_EXECUTABLE, MISSING_EXECUTABLE, CheckRefused


def resolve_executable(policy: SandboxPolicy, program: str, *, cwd: str, search_path: str) -> str:
    """The absolute path to execute for ``program`` if the allowlist permits it; raises ``CheckRefused``."""
    allowed = policy.allowed_executables
    if "/" not in program:
        found = shutil.which(program, path=search_path)
        if program in allowed:
            if found is None:
                raise CheckRefused(
                    MISSING_EXECUTABLE, f"executable {program!r} not found on PATH {search_path}"
                )
            return os.path.abspath(found)
        if found is not None and _path_allowed(os.path.abspath(found), allowed):
            return os.path.abspath(found)
        raise CheckRefused(DENIED_EXECUTABLE, f"executable {program!r} is not on the allowlist")
    candidate = os.path.normpath(os.path.join(cwd, program))
    if not _path_allowed(candidate, allowed):
        raise CheckRefused(DENIED_EXECUTABLE, f"executable {program!r} ({candidate}) is not on the allowlist")
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        raise CheckRefused(MISSING_EXECUTABLE, f"executable {candidate} does not exist or is not executable")
    return candidate


def _path_allowed(path: str, allowed: frozenset[str]) -> bool:
    """Whether ``path`` names the same file as an absolute allowlist entry, each side as given or resolved."""
    if path in allowed:
        return True
    resolved = os.path.realpath(path)
    return any(os.path.isabs(entry) and resolved in (entry, os.path.realpath(entry)) for entry in allowed)


def allowlisted_paths(policy: SandboxPolicy, search_path: str) -> list[str]:
    """Where the allowlisted executables are, so a check sees all of them (a program may call another)."""
    found = []
    for entry in sorted(policy.allowed_executables):
        path = entry if os.path.isabs(entry) else shutil.which(entry, path=search_path)
        if path is not None and os.path.isfile(path):
            found.append(os.path.abspath(path))
    return found
