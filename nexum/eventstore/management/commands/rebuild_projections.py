from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from nexum.eventstore import projections, reading


class Command(BaseCommand):
    help = "Drop every read model and rebuild it from the event log (optionally as of a position)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument(
            "--until", type=int, default=None, help="rebuild the state as of this log position (time travel)"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, until=None, no_progress=False, **options):  # type: ignore[no-untyped-def]
        if until is not None and until < 0:
            raise CommandError("--until must be a non-negative position")
        head = reading.head_position()
        total = min(head, until) if until is not None else head
        with tqdm(total=total, unit="event", disable=no_progress, file=self.stderr) as bar:
            replayed = projections.rebuild(until=until, progress=bar.update)
        names = ", ".join(type(p).__name__ for p in projections.registered())
        self.stdout.write(f"replayed {replayed} events through {names}; head position {head}")
