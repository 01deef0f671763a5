"""Backup and restore, shown (issue 27 item 5): a PostgreSQL installation's database is dumped with
``pg_dump`` (custom format) and its data folder (the artifact store) copied; both are restored into a new
database and folder, and there the log's chain verifies, every stored context replays to its digest and the
read models equal the original's. The README's "Backup and restore" section is this procedure."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.installations import Installation, new_postgres_database

pytestmark = pytest.mark.postgres


@pytest.mark.skipif(
    not (shutil.which("pg_dump") and shutil.which("pg_restore")), reason="no pg_dump/pg_restore"
)
def test_a_pg_dump_restores_into_a_new_database_that_verifies(tmp_path: Path) -> None:
    with new_postgres_database("backup") as live_url, new_postgres_database("restored") as restored_url:
        live = Installation(tmp_path / "live", live_url)
        live.manage("migrate", "-v0")
        live.run("tests/e2e/portable_world.py", "build", "acme")
        before = live.snapshot("acme")
        assert before["replays"] and all(before["replays"].values())

        dump = tmp_path / "nexum.dump"
        subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", live_url], check=True, timeout=120)
        shutil.copytree(tmp_path / "live", tmp_path / "restored")
        subprocess.run(
            ["pg_restore", "--no-owner", f"--dbname={restored_url}", str(dump)], check=True, timeout=120
        )

        restored = Installation(tmp_path / "restored", restored_url)
        verified = restored.manage("nexum_verify_log").stdout
        assert f"{before['head'][1]} events" in verified
        after = restored.snapshot("acme")
        assert after == before
