"""Many tasks in rotation (issue 15): the compile service when a process serves 200 tasks in turn, against
the same task compiled again and again. Run by hand; not a test.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_rotation_bench .venv/bin/python bench/rotation.py

Builds ``BENCH_GOALS`` (4) goals of ``BENCH_ITEMS`` (10,000) items each with ``BENCH_TASKS_PER_GOAL`` (50)
running tasks each (bench/worlds.py: 70% of a goal's items shared by its tasks), then times, in process,
the whole compile service for the ``local`` card: ``repeat``, one task compiled ``BENCH_RUNS`` (30) times;
``rotation``, every task in turn, ``BENCH_ROUNDS`` (2) rounds after one round of warm-up (each task's
first compile in the process reads its candidates whole). Nothing changes the world between compiles. It
prints p50/p95 of both, their ratio (goal: rotation p50 <= 1.5 × repeat p50), the candidate cache's
estimated size and the process's max RSS. Uses (and resets) the database named by DATABASE_URL.
"""

from __future__ import annotations

import os
import resource
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
from worlds import build_world  # noqa: E402  (bench/worlds.py, beside this script)

from context_app.compilation.candidates import CANDIDATES  # noqa: E402
from context_app.compilation.services.compiles import context_compile  # noqa: E402

GOALS = int(os.environ.get("BENCH_GOALS", 4))
ITEMS = int(os.environ.get("BENCH_ITEMS", 10_000))
TASKS_PER_GOAL = int(os.environ.get("BENCH_TASKS_PER_GOAL", 50))
RUNS = int(os.environ.get("BENCH_RUNS", 30))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 2))
WORD = "local"


def percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    started = time.perf_counter()
    world = build_world(
        slug="rotation", size=ITEMS, goals=GOALS, tasks_per_goal=TASKS_PER_GOAL, own_share=0.3
    )
    print(
        f"database: {connection.vendor}; {GOALS} goals × {ITEMS} items, {len(world.tasks)} running tasks "
        f"(loaded in {time.perf_counter() - started:.0f}s); model word {WORD!r}; load averages "
        f"{' '.join(f'{value:.2f}' for value in os.getloadavg())}"
    )

    def compile_once(task_id: str) -> float:
        begun = time.perf_counter()
        context_compile(project_id=world.project_id, task_id=task_id, model_word=WORD, actor="bench")
        return (time.perf_counter() - begun) * 1000

    first = str(world.tasks[0].id)
    compile_once(first)
    repeat = [compile_once(first) for _ in range(RUNS)]
    task_ids = [str(task.id) for task in world.tasks]
    for task_id in task_ids:  # warm-up: each task's first compile in this process
        compile_once(task_id)
    rotation = [compile_once(task_id) for _ in range(ROUNDS) for task_id in task_ids]
    for name, times in (("repeat", repeat), ("rotation", rotation)):
        print(f"  {name:<9} p50 {percentile(times, 0.5):8.1f} ms   p95 {percentile(times, 0.95):8.1f} ms")
    ratio = statistics.median(rotation) / statistics.median(repeat)
    print(f"  rotation / repeat p50 {ratio:.2f} (goal <= 1.5)")
    print(
        f"  candidate cache: {len(CANDIDATES)} tasks, "
        f"about {CANDIDATES.estimated_bytes() / 2**20:.0f} MiB estimated"
    )
    print(f"  process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"  load averages {' '.join(f'{value:.2f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
