"""Installations for the export/import and backup tests: each a database and a data folder, driven by
subprocess (``manage.py`` and ``tests/e2e/portable_world.py`` under its own DATABASE_URL), as on separate
machines; and new PostgreSQL databases with unique names, dropped afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
POSTGRES = os.environ.get("NEXUM_TEST_POSTGRES_ADMIN", "postgres://postgres@127.0.0.1:5432/postgres")


def _postgres_reachable() -> bool:
    try:
        psycopg.connect(POSTGRES, connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


@contextlib.contextmanager
def new_postgres_database(purpose: str) -> Iterator[str]:
    """A new PostgreSQL database (unique name), dropped afterwards; its URL."""
    if not _postgres_reachable():
        pytest.skip(f"no PostgreSQL at {POSTGRES}")
    name = f"nexum_test_{purpose}_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Installation:
    """One installation: a database and a data folder (the artifact store), run by subprocess."""

    def __init__(self, data_dir: Path, database_url: str | None) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "NEXUM_DATA_DIR": str(data_dir), "NEXUM_EMBEDDER": "none"}
        self.env.pop("DATABASE_URL", None)
        if database_url is not None:
            self.env["DATABASE_URL"] = database_url

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{args} exited {done.returncode}: {done.stderr[-3000:]}")
        return done

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("manage.py", *args, check=check)

    def snapshot(self, slug: str, until: int | None = None) -> dict:
        args = ["tests/e2e/portable_world.py", "snapshot", slug] + ([str(until)] if until else [])
        return json.loads(self.run(*args).stdout)
