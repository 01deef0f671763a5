"""The sweep of a project's folder after every command check (item 6 of the package docstring): no setuid or
setgid bit and no device node is left, whoever made them."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from typing import Final

# At most this many entries of a project's folder are looked at by the sweep after each command check.
SWEEP_MAX_ENTRIES: Final = 200_000


@dataclass
class Sweep:
    """What ``sweep_workspace`` changed: the files whose setuid/setgid bits it cleared, the device nodes it
    removed."""

    cleared: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    seen: int = 0
    incomplete: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.cleared or self.removed)

    def describe(self) -> str:
        said = []
        if self.cleared:
            said.append(f"cleared the setuid/setgid bits of {', '.join(sorted(self.cleared)[:20])}")
        if self.removed:
            said.append(f"removed the device nodes {', '.join(sorted(self.removed)[:20])}")
        if self.incomplete:
            said.append(f"the sweep of the workspace stopped after {self.seen} entries")
        return "; ".join(said)


_SPECIAL_BITS: Final = stat.S_ISUID | stat.S_ISGID
_WALK_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def sweep_workspace(root: str, max_entries: int = SWEEP_MAX_ENTRIES) -> Sweep:
    """After a command check: no file or folder of the project keeps a setuid or setgid bit and no device
    node is left (FIFOs and sockets stay), whoever made them. The walk goes from folder descriptors and never
    follows a symlink, so another check swapping a folder for a link to /usr cannot steer it out of ``root``;
    it looks at ``max_entries`` entries at most (``incomplete`` then says so)."""
    sweep = Sweep()
    try:
        top = os.open(root, _WALK_FLAGS)
    except OSError:
        return sweep
    _sweep_entry(top, ".", ".", sweep)
    pending = [(top, "")]
    try:
        while pending:
            folder, where = pending.pop()
            try:
                try:
                    names = os.listdir(folder)
                except OSError:
                    continue
                for name in names:
                    if sweep.seen >= max_entries:
                        sweep.incomplete = True
                        return sweep
                    sweep.seen += 1
                    relative = f"{where}/{name}" if where else name
                    if _sweep_entry(folder, name, relative, sweep):
                        with contextlib.suppress(OSError):
                            pending.append((os.open(name, _WALK_FLAGS, dir_fd=folder), relative))
            finally:
                os.close(folder)
    finally:
        for folder, _ in pending:
            os.close(folder)
    return sweep


def _sweep_entry(folder: int, name: str, relative: str, sweep: Sweep) -> bool:
    """Clear or remove ``name`` in ``folder`` as ``sweep_workspace`` says; True when it is a folder."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return False
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=folder)
            sweep.removed.append(relative)
        return False
    if info.st_mode & _SPECIAL_BITS and (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        # chmod through an O_PATH descriptor of the very inode that was looked at, never through a name
        with contextlib.suppress(OSError):
            handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            try:
                now = os.fstat(handle)
                if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                    os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(now.st_mode) & ~_SPECIAL_BITS)
                    sweep.cleared.append(relative)
            finally:
                os.close(handle)
    return stat.S_ISDIR(info.st_mode) and name != "."
