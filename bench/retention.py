"""What retention frees and what it costs (issue 27 item 4). Run by hand; not a test.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench \\
        .venv/bin/python bench/retention.py [ITEMS] [COMPILES]

A world of ITEMS items (default 2,000; bench/worlds.py's) whose task is compiled COMPILES times (default 100)
for the ``frontier`` card, the agent recording a progress note before each compile (every compile stores a new
context). The oldest 80% of the contexts are then made 40 days old and a policy of 30 days is set. It prints
the stored contexts' size before and after ``nexum_retention`` (``stored_size``: their values as stored, and
the table or file after a vacuum), the command's own summary and time, that every remaining context
and every pruned one replays to its digest, and what a read of a pruned context costs (it is recompiled at its
position) against a stored one. Uses (and resets) the database named by DATABASE_URL; runs on SQLite too.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.utils import timezone  # noqa: E402
from worlds import build_world  # noqa: E402  (bench/worlds.py, beside this script)

from context_app.compilation.models import ContextCompilation, StoredContext  # noqa: E402
from context_app.compilation.selectors.contexts import context_get  # noqa: E402
from context_app.compilation.services.compiles import context_compile  # noqa: E402
from context_app.compilation.services.replays import context_content, context_replay  # noqa: E402
from context_app.world.services.records import progress_record  # noqa: E402
from context_app.world.services.scopes import scope_resolve  # noqa: E402
from tasks_app.services.projects import project_retention_set  # noqa: E402

TABLE = StoredContext._meta.db_table


def stored_size() -> tuple[int, int]:
    """Bytes the stored contexts take: their values as stored (PostgreSQL: each column's ``pg_column_size``,
    compressed as in TOAST; SQLite: their lengths) and on disk after a vacuum (PostgreSQL: the table with its
    TOAST and indexes after ``VACUUM FULL``; SQLite: the whole database file)."""
    connections.close_all()  # a snapshot another connection of this process holds would keep old row versions
    columns = ("prompt_block", "exclusion_runs", "included", "tools", "truncated", "section_tokens", "budget")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT " + " + ".join(f"sum(pg_column_size({c}))" for c in columns) + f" FROM {TABLE}"
            )
            values = int(cursor.fetchone()[0])
            cursor.execute(f"VACUUM FULL {TABLE}")
            cursor.execute("SELECT pg_total_relation_size(%s)", [TABLE])
            return values, int(cursor.fetchone()[0])
        cursor.execute("SELECT " + " + ".join(f"sum(length({c}))" for c in columns) + f" FROM {TABLE}")
        values = int(cursor.fetchone()[0])
        cursor.execute("VACUUM")
    return values, os.path.getsize(settings.DATABASES["default"]["NAME"])


def timed(run) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    items = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
    compiles = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    world = build_world(slug="retention", size=items)
    project_id, task = world.project_id, world.tasks[0]
    scope = scope_resolve(project_id=project_id, task_id=str(task.id))
    digests = []
    for index in range(compiles):
        progress_record(scope=scope, text=f"step {index}: ran the spec again", actor="bench")
        outcome = context_compile(
            project_id=project_id, task_id=str(task.id), model_word="frontier", actor="bench"
        )
        digests.append(outcome.context.digest)
    old = digests[: compiles * 4 // 5]
    then = timezone.now() - timedelta(days=40)
    StoredContext.objects.filter(digest__in=old).update(stored_at=then)
    ContextCompilation.objects.filter(digest__in=old).update(finished_at=then)
    project_retention_set(project_id=project_id, policy={"context_days": 30}, actor="bench")
    print(f"{connection.vendor}: {items} items, {compiles} stored contexts, {len(old)} older than 30 days")

    before = stored_size()
    dry = StringIO()
    dry_s = timed(lambda: call_command("nexum_retention", "--dry-run", stdout=dry))
    out = StringIO()
    run_s = timed(lambda: call_command("nexum_retention", stdout=out))
    after = stored_size()
    print(f"dry run ({dry_s:.2f} s): {dry.getvalue().strip().splitlines()[0]}")
    print(f"run ({run_s:.2f} s): {out.getvalue().strip().splitlines()[0]}")
    print(
        f"stored contexts' values: {before[0]:,} bytes before, {after[0]:,} after; "
        f"on disk: {before[1]:,} before, {after[1]:,} after"
    )

    replays = [context_replay(project_id=project_id, digest=digest) for digest in digests]
    print(f"replays matching: {sum(r.matches for r in replays)} of {len(replays)} ({len(old)} pruned)")
    reads_pruned = [
        timed(lambda d=d: context_content(context_get(project_id=project_id, digest=d))) for d in old[:10]
    ]
    reads_stored = [
        timed(lambda d=d: context_content(context_get(project_id=project_id, digest=d)))
        for d in digests[len(old) :][:10]
    ]
    print(
        f"read of a context: stored {statistics.median(reads_stored) * 1000:.1f} ms, "
        f"pruned (recompiled) {statistics.median(reads_pruned) * 1000:.1f} ms (medians of 10)"
    )


if __name__ == "__main__":
    main()
