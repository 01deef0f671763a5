"""Forking a goal of 10,000 items (run by hand; not a test). Goal: <= 2 s on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_bench .venv/bin/python bench/fork.py

Builds a goal of ``BENCH_FORK_ITEMS`` world items (bench/worlds.py: the realistic mix, half shared by the
goal, half owned by its ``BENCH_FORK_TASKS`` tasks), then forks it ``BENCH_FORK_RUNS`` times at the log's
head and at its middle through the service (``goal_fork``: the state as of the position rebuilt, the plan
and every item carried as events, their read models and vectors written), and prints each time with the
median, this process's CPU time (the rest is the database's and waiting for the machine), and, beside
it, what a full rebuild as of the position (``state_as_of``, a replay's) takes. Uses (and resets) the
database named by DATABASE_URL; runs on SQLite too, but the figure that matters is PostgreSQL's.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from context_app.compilation import forks  # noqa: E402
from context_app.world.embedder import configured_embedder_id  # noqa: E402
from context_app.world.models import WorldItem  # noqa: E402
from nexum.eventstore import projections, reading  # noqa: E402

ITEMS = int(os.environ.get("BENCH_FORK_ITEMS", 10_000))
TASKS = int(os.environ.get("BENCH_FORK_TASKS", 10))
RUNS = int(os.environ.get("BENCH_FORK_RUNS", 5))
GOAL_SECONDS = 2.0


def main() -> None:
    from bench.worlds import build_world

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    print(
        f"database: {connection.vendor}; a goal of {ITEMS} items, {TASKS} tasks; {RUNS} runs per position; "
        f"embedder {configured_embedder_id() or 'none'}"
    )
    bench = build_world(slug="fork-bench", size=ITEMS, tasks_per_goal=TASKS)
    goal = bench.goals[0]
    head = reading.project_head(bench.project_id)[0]
    middle = WorldItem.objects.filter(goal_id=goal.id).order_by("position").values_list("position", flat=True)
    positions = {"head": head, "middle": middle[ITEMS // 2]}
    worst = 0.0
    for name, position in positions.items():
        started = time.perf_counter()
        with projections.state_as_of(position, project_id=bench.project_id):
            pass
        as_of = time.perf_counter() - started
        times, cpu, carried = [], [], 0
        for _ in range(RUNS):
            started, started_cpu = time.perf_counter(), time.process_time()
            outcome = forks.goal_fork(
                project_id=bench.project_id,
                goal_id=str(goal.id),
                at_position=position,
                reason="bench",
                actor="bench",
            )
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
            carried = outcome.carried_items
        median = statistics.median(times)
        worst = max(worst, median)
        print(
            f"fork at the {name} (position {position}, {carried} items carried): "
            f"{', '.join(f'{t:.2f}' for t in times)} s; median {median:.2f} s, this process's CPU "
            f"{statistics.median(cpu):.2f} s (a full rebuild as of the position, a replay's, {as_of:.2f} s)"
        )
    print(f"goal: forking a goal of {ITEMS} items <= {GOAL_SECONDS:.0f} s: median {worst:.2f} s")


if __name__ == "__main__":
    main()
