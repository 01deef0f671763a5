"""A private PostgreSQL primary and a hot standby streaming from it, for the replica test and bench/agents.py.

The primary is made with ``initdb`` (trust auth, WAL for replication), the standby with ``pg_basebackup``
from a replication slot; both listen on 127.0.0.1 on the ports given and live in a temporary folder that is
removed at the end. The shared server is not touched. As root, the tools run as the ``postgres`` user
(``runuser``): initdb refuses root.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("initdb", "pg_ctl", "pg_basebackup", "psql")
AS_ROOT = os.geteuid() == 0


def postgres_bindir() -> Path | None:
    """A folder holding all of the server tools: the newest Debian one, else the one on PATH."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if all((candidate / tool).exists() for tool in TOOLS):
            return candidate
    found = [shutil.which(tool) for tool in TOOLS]
    if all(found) and len({Path(path).parent for path in found if path}) == 1:
        return Path(found[0]).parent  # type: ignore[arg-type]
    return None


BINDIR = postgres_bindir()


def missing() -> str | None:
    """Why a streaming pair cannot be made here, or None."""
    if BINDIR is None:
        return (
            "a private streaming replica needs initdb, pg_ctl, pg_basebackup and psql of one PostgreSQL "
            "(apt-get install postgresql)"
        )
    if AS_ROOT and (
        shutil.which("runuser") is None or not any(u.pw_name == "postgres" for u in pwd.getpwall())
    ):
        return (
            "as root, the private cluster must run as the 'postgres' user through runuser "
            "(initdb refuses root)"
        )
    return None


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Clusters:
    folder: Path
    primary: Path
    replica: Path
    primary_port: int
    replica_port: int

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """One PostgreSQL tool, as the ``postgres`` user when run as root."""
        command = [str(BINDIR / tool), *args]
        if AS_ROOT:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=self.folder)
        if check and done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def start(self, data: Path) -> None:
        self.run("pg_ctl", "-D", str(data), "-l", str(data / "server.log"), "-w", "-t", "120", "start")

    def stop(self, data: Path) -> None:
        self.run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "-t", "120", "stop", check=False)

    def sql(self, port: int, statement: str, database: str = "postgres") -> str:
        done = self.run(
            "psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", database, "-XAtc", statement
        )
        return done.stdout.strip()


@contextlib.contextmanager
def streaming_pair(
    primary_port: int, replica_port: int, *, slot: str, shared_buffers: str = "32MB"
) -> Iterator[Clusters]:
    """A primary on ``primary_port`` and a hot standby of it on ``replica_port``, stopped and removed at the
    end of the block."""
    for port in (primary_port, replica_port):
        if port_taken(port):
            raise RuntimeError(f"port {port} is taken: a private streaming pair needs it free")
    folder = Path(tempfile.mkdtemp(prefix="nexum-replica-"))
    folder.chmod(0o755)
    if AS_ROOT:
        postgres = pwd.getpwnam("postgres")
        os.chown(folder, postgres.pw_uid, postgres.pw_gid)
    made = Clusters(folder, folder / "primary", folder / "replica", primary_port, replica_port)
    started: list[Path] = []
    try:
        made.run(
            "initdb", "-D", str(made.primary), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        with (made.primary / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {primary_port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{folder}'\n"
                "wal_level = replica\nmax_wal_senders = 4\nmax_replication_slots = 4\nhot_standby = on\n"
                f"fsync = off\nshared_buffers = {shared_buffers}\nmax_connections = 200\n"
            )
        made.start(made.primary)
        started.append(made.primary)
        made.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary_port), "-U", "postgres",
            "-D", str(made.replica), "-R", "-X", "stream", "-C", "-S", slot, "--no-sync",
        )  # fmt: skip
        with (made.replica / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"port = {replica_port}\n")
        made.start(made.replica)
        started.append(made.replica)
        if made.sql(replica_port, "SELECT pg_is_in_recovery()") != "t":
            raise AssertionError("the standby is not in recovery")
        yield made
    finally:
        for data in reversed(started):
            made.stop(data)
        shutil.rmtree(folder, ignore_errors=True)
