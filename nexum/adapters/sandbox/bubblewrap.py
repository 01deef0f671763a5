"""The bubblewrap (``bwrap``) sandbox a command check runs in: what it mounts and its command line.

Framework-free: no Django, no Celery. The rest of ``nexum/adapters/sandbox/`` decides what runs; this module
builds the world it runs in:

- namespaces: user, PID, network (loopback only, nothing listening), IPC, UTS and cgroup; no capabilities;
  no further user namespaces (``--disable-userns``); uid and gid ``SANDBOX_UID`` inside, mapped to the user
  that runs bwrap (an unprivileged one: ``nexum.adapters.sandbox`` never runs it as root); ``--new-session``
  (no terminal to inject keystrokes into); ``--die-with-parent``.
- filesystem: an empty root with only what a check needs, each read-only: ``/usr`` and the ``/bin``,
  ``/sbin``, ``/lib*`` links or folders, a few files of ``/etc`` (``ETC_ENTRIES``; ``/etc/passwd`` and
  ``/etc/group`` are written for the sandbox and list no host account), the install prefixes of the
  allowlisted executables (a venv and the interpreter it was made from), and the operator's extra paths;
  the project's workspace folder read-write at ``/workspace`` (nosuid,nodev, as bwrap binds every mount);
  its own ``/proc`` and ``/dev``, and private tmpfs ``/tmp`` and ``/dev/shm`` (each at most ``tmp_bytes``).
  Nothing else of the host exists inside, and nothing else is writable: the sandbox's root and ``/dev`` are
  remounted read-only.
- ``plan_mounts`` refuses a mount that would show a hidden path (the data directory, the artifact store, the
  database file, the workspace root with the other projects' folders, /run) or contain a private one (/root,
  /home, the source tree): ``SandboxUnavailable``, nothing runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

WORKSPACE_MOUNT: Final = "/workspace"
SANDBOX_UID: Final = 1000
SANDBOX_GID: Final = 1000
HOSTNAME: Final = "nexum-check"
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs commonly read under /etc (the dynamic linker, name service and time zone files, the
# alternatives links of Debian's executables, CA certificates); secrets such as /etc/shadow or
# /etc/ssl/private are never among them.
ETC_ENTRIES: Final = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "hosts",
    "localtime",
    "timezone",
    "protocols",
    "services",
    "mime.types",
    "os-release",
    "debian_version",
    "ssl/certs",
)
PASSWD: Final = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"check:x:{SANDBOX_UID}:{SANDBOX_GID}:Nexum check:/tmp:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP: Final = f"root:x:0:\ncheck:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"
# Whatever the configuration: /run holds the PostgreSQL and Redis sockets and is never shown; these folders
# are never mounted whole (a folder inside one may be: /etc/hosts, an interpreter under /root/.pyenv).
HOST_HIDDEN: Final = ("/run", "/var/run")
HOST_PRIVATE: Final = ("/root", "/home", "/etc", "/proc", "/sys", "/dev", "/boot", "/var", "/tmp")
# Kernel internals that uid 0 may read even without capabilities (a sandbox bwrap runs as root is uid 0
# outside its user namespace; nexum.adapters.sandbox runs it as an unprivileged user, this holds whoever
# calls): covered by an unopenable device node, as container runtimes mask them.
MASKED_PROC_FILES: Final = (
    "/proc/kpageflags",
    "/proc/kpagecount",
    "/proc/kpagecgroup",
    "/proc/slabinfo",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/vmallocinfo",
    "/proc/pagetypeinfo",
    "/proc/iomem",
    "/proc/ioports",
    "/proc/keys",
    "/proc/key-users",
)
_PROBE_TIMEOUT_S: Final = 20.0


class SandboxUnavailable(Exception):
    """The sandbox cannot be set up as configured; the message says why and how to fix it."""


def find_bwrap() -> str | None:
    return shutil.which("bwrap", path=os.environ.get("PATH") or "/usr/bin:/bin")


@dataclass(frozen=True)
class MountPlan:
    """Host paths a check sees: ``symlinks`` (target, link) for merged-/usr links such as /bin,
    ``read_only`` folders and files mounted at their own path, and ``workspace`` mounted at /workspace."""

    symlinks: tuple[tuple[str, str], ...]
    read_only: tuple[str, ...]
    workspace: str | None

    def shows(self, host_path: str) -> bool:
        """True when ``host_path`` (resolved) is inside a read-only mount."""
        resolved = os.path.realpath(host_path)
        return any(_inside(resolved, mount) for mount in self.read_only)

    def inside_path(self, host_path: str) -> str:
        """Where ``host_path`` is inside the sandbox: the workspace moves to /workspace, the rest stays."""
        if self.workspace is not None and _inside(host_path, self.workspace):
            return WORKSPACE_MOUNT + host_path[len(self.workspace) :]
        return host_path


def plan_mounts(
    *,
    workspace: str | None,
    executables: Iterable[str],
    extra_read_only: Iterable[str] = (),
    hidden: Iterable[str] = (),
    private: Iterable[str] = (),
) -> MountPlan:
    """What a check sees (see the module docstring); raises ``SandboxUnavailable``.

    ``executables`` are absolute host paths: the one the check runs and the rest of the allowlist, so that a
    program may call another allowlisted one. ``hidden`` (with ``HOST_HIDDEN``): paths no mount may show, in
    whole or in part. ``private`` (with ``HOST_PRIVATE``): paths no mount may contain (a folder inside one may
    be mounted: an interpreter installed under /root/.pyenv, a venv inside the source tree).
    """
    hidden_paths = sorted({os.path.realpath(path) for path in (*HOST_HIDDEN, *hidden)})
    private_paths = sorted({os.path.realpath(path) for path in (*HOST_PRIVATE, *private)})
    symlinks: list[tuple[str, str]] = []
    system: list[str] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            symlinks.append((os.readlink(folder), folder))
        elif os.path.isdir(folder):
            system.append(folder)
    system += [path for name in ETC_ENTRIES if os.path.lexists(path := f"/etc/{name}")]
    extras = []
    for path in extra_read_only:
        if not os.path.exists(path):
            raise SandboxUnavailable(f"the read-only path {path} (NEXUM_SANDBOX_RO_PATHS) does not exist")
        extras.append(os.path.realpath(path))
    prefixes = [prefix for executable in executables for prefix in install_prefixes(executable)]
    workspace = os.path.realpath(workspace) if workspace is not None else None

    read_only: list[str] = []
    for path in system:  # mounted where programs look for them (bwrap follows a symlinked file)
        _refuse_exposure(os.path.realpath(path), hidden_paths, private_paths, writable=False)
        read_only.append(path)
    for path in [*extras, *sorted(set(prefixes), key=len)]:
        covered = any(_inside(path, mount) for mount in read_only)
        if covered or (workspace is not None and _inside(path, workspace)):
            continue
        _refuse_exposure(path, hidden_paths, private_paths, writable=False)
        read_only.append(path)
    if workspace is not None:
        _refuse_exposure(workspace, hidden_paths, private_paths, writable=True)
    return MountPlan(symlinks=tuple(symlinks), read_only=tuple(read_only), workspace=workspace)


def install_prefixes(executable: str) -> list[str]:
    """The folders an executable needs: the parent of its ``bin`` folder (or its own folder), both as found
    and after following symlinks, plus the base interpreter a venv was made from (``pyvenv.cfg``)."""
    found = os.path.abspath(executable)
    prefixes = []
    for path in (os.path.join(os.path.realpath(os.path.dirname(found)), os.path.basename(found)),
                 os.path.realpath(found)):  # fmt: skip
        folder = os.path.dirname(path)
        prefix = os.path.dirname(folder) if os.path.basename(folder) in ("bin", "sbin") else folder
        prefixes.append(prefix)
        base = _venv_base(prefix)
        if base is not None:
            prefixes.append(base)
    return prefixes


def _venv_base(prefix: str) -> str | None:
    try:
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8") as config:
            lines = config.read().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = os.path.realpath(value.strip())
            return os.path.dirname(home) if os.path.basename(home) in ("bin", "Scripts") else home
    return None


def _refuse_exposure(mount: str, hidden: Sequence[str], private: Sequence[str], *, writable: bool) -> None:
    what = "the workspace" if writable else "the read-only mount"
    for path in (*hidden, *private):
        if _inside(path, mount):
            raise SandboxUnavailable(
                f"{what} {mount} would show {path}, which no check may see; move it out of {mount}"
                " (or change the allowlisted executable or NEXUM_SANDBOX_RO_PATHS entry that needs it)"
            )
    if not writable:
        for path in hidden:
            if _inside(mount, path):
                raise SandboxUnavailable(f"{what} {mount} lies inside {path}, which no check may see")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def command_line(
    bwrap: str,
    plan: MountPlan,
    argv: Sequence[str],
    *,
    cwd: str,
    info_fd: int,
    passwd_fd: int,
    group_fd: int,
    tmp_bytes: int | None,
) -> list[str]:
    """The bwrap argv running ``argv`` (inside paths) in ``cwd`` (an inside path) under ``plan``.

    ``info_fd`` receives bwrap's JSON with ``child-pid``, the host pid of the sandbox's PID 1 (killing it ends
    every process of the sandbox); ``passwd_fd`` and ``group_fd`` hold the sandbox's /etc/passwd and group.
    """
    line = [
        bwrap,
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--hostname",
        HOSTNAME,
        "--proc",
        "/proc",
        # Sysctls check the writer's uid, not its capabilities: a sandbox bwrap runs as root is uid 0 outside
        # its user namespace and could change the host's kernel settings. Read-only, they are safe to show.
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
    ]
    for masked in MASKED_PROC_FILES:
        if os.path.exists(masked):
            line += ["--ro-bind", "/dev/null", masked]
    line += ["--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):
        if tmp_bytes is not None:
            line += ["--size", str(tmp_bytes)]
        line += ["--tmpfs", scratch]
    for target, link in plan.symlinks:
        line += ["--symlink", target, link]
    for path in plan.read_only:
        line += ["--ro-bind", path, path]
    line += ["--perms", "0444", "--ro-bind-data", str(passwd_fd), "/etc/passwd"]
    line += ["--perms", "0444", "--ro-bind-data", str(group_fd), "/etc/group"]
    if plan.workspace is not None:  # bwrap binds with MS_NOSUID | MS_NODEV: no setuid file or device works
        line += ["--bind", plan.workspace, WORKSPACE_MOUNT]
    # The root and /dev are bwrap's own tmpfs: read-only, so only /tmp, /dev/shm and /workspace take writes.
    line += ["--remount-ro", "/dev", "--remount-ro", "/"]
    line += ["--chdir", cwd, "--info-fd", str(info_fd), "--", *argv]
    return line


def data_fd(text: str) -> int:
    """A file descriptor holding ``text`` from its start, for ``--ro-bind-data``."""
    fd = os.memfd_create("nexum-sandbox-data")
    os.write(fd, text.encode("utf-8"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_working: set[tuple[str, tuple[int, int] | None]] = set()


def probe(bwrap: str, *, user: tuple[int, int] | None = None) -> str | None:
    """None when ``bwrap`` can build the sandbox on this machine, else why not (bwrap's own words); ``user``
    is the (uid, gid) a root worker runs it as, with no supplementary groups.

    A success is remembered for the process; a failure is tried again next time (the operator may fix it).
    """
    if (bwrap, user) in _working:
        return None
    plan = plan_mounts(workspace=None, executables=())
    true = shutil.which("true", path="/usr/bin:/bin") or "/bin/true"
    info_read, info_write = os.pipe()
    passwd, group = data_fd(PASSWD), data_fd(GROUP)
    try:
        done = subprocess.run(
            command_line(
                bwrap,
                plan,
                [true],
                cwd="/",
                info_fd=info_write,
                passwd_fd=passwd,
                group_fd=group,
                tmp_bytes=1024 * 1024,
            ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            pass_fds=(info_write, passwd, group),
            timeout=_PROBE_TIMEOUT_S,
            env={"PATH": "/usr/bin:/bin"},
            user=None if user is None else user[0],
            group=None if user is None else user[1],
            extra_groups=None if user is None else [],
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{bwrap} could not run: {type(exc).__name__}: {exc}"
    finally:
        for fd in (info_read, info_write, passwd, group):
            os.close(fd)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        return f"{bwrap} cannot create the sandbox here (exit status {done.returncode}): {said}"
    _working.add((bwrap, user))
    return None
