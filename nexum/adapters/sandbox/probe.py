"""Whether command checks can run here as a policy asks: bubblewrap installed and able to build the sandbox,
a pids cgroup for a root worker, the host user able to reach the mounts. ``sandbox_unavailable`` says what
is missing and how to fix it (``manage.py check`` reports it at start); each check is refused the same way.
"""

from __future__ import annotations

import os

from nexum.adapters.sandbox import bubblewrap
from nexum.adapters.sandbox.executables import allowlisted_paths
from nexum.adapters.sandbox.pids_cgroup import CgroupUnavailable, find_parent
from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.adapters.sandbox.staging import host_user, stage_or_refuse
from nexum.core.verification.checks.base import SANDBOX_UNAVAILABLE, CheckRefused


def sandbox_unavailable(policy: SandboxPolicy) -> str | None:
    """Why command checks cannot run as ``policy`` asks here and how to fix it; None when they can."""
    try:
        usable_bwrap(policy)
        run_as = host_user(policy)
        if run_as is not None:
            env = policy.child_env()
            plan = bubblewrap.plan_mounts(
                workspace=None,
                executables=allowlisted_paths(policy, env["PATH"]),
                extra_read_only=policy.read_only_paths,
                hidden=policy.hidden_paths,
                private=policy.private_paths,
            )
            stage_or_refuse(plan, None, run_as)
    except CheckRefused as refusal:
        return refusal.message
    except bubblewrap.SandboxUnavailable as exc:
        return str(exc)
    return None


def usable_bwrap(policy: SandboxPolicy) -> str:
    """The bwrap to run checks with; raises ``CheckRefused`` (``sandbox_unavailable``) saying what is
    missing."""
    bwrap = bubblewrap.find_bwrap()
    if bwrap is None:
        raise CheckRefused(
            SANDBOX_UNAVAILABLE,
            "bubblewrap (bwrap) is not installed on this worker, and command checks never run unsandboxed:"
            " install it (apt-get install bubblewrap), or on a development machine set NEXUM_SANDBOX=none to"
            " run checks without a sandbox",
        )
    problem = bubblewrap.probe(bwrap, user=host_user(policy))
    if problem is not None:
        raise CheckRefused(
            SANDBOX_UNAVAILABLE,
            f"{problem}; unprivileged user namespaces must be allowed (sysctl user.max_user_namespaces > 0,"
            " kernel.unprivileged_userns_clone=1 where it exists)",
        )
    if needs_cgroup(policy):
        try:
            find_parent(policy.cgroup_parent)
        except CgroupUnavailable as exc:
            raise CheckRefused(SANDBOX_UNAVAILABLE, cgroup_advice(exc)) from None
    return bwrap


def needs_cgroup(policy: SandboxPolicy) -> bool:
    """RLIMIT_NPROC binds every user but root: a root worker needs a pids cgroup for the process limit."""
    return policy.max_processes is not None and os.geteuid() == 0


def cgroup_advice(problem: CgroupUnavailable) -> str:
    return (
        "the worker runs as root, for whom the kernel does not enforce RLIMIT_NPROC, and no pids cgroup can"
        f" hold the process limit ({problem}): run the worker as an unprivileged user, give it a writable"
        " pids cgroup (NEXUM_SANDBOX_CGROUP), or set NEXUM_CHECK_MAX_PROCESSES=0 to run checks without a"
        " process limit"
    )
