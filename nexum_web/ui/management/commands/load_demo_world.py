"""Load the demo world into the ``demo`` project (idempotent: a second run writes nothing)."""

from django.core.management.base import BaseCommand

from nexum_web.ui.demo import load_demo_world


class Command(BaseCommand):
    help = "Load the demo world: the auth-spec goal, its tasks, world state, sources, checks and compiles."

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        world = load_demo_world(log=lambda line: self.stdout.write(f"  {line}"))
        states = ", ".join(f"{key} {task.state}" for key, task in sorted(world.tasks.items()))
        self.stdout.write(f"demo world: {world.goal.objective} ({states})")
