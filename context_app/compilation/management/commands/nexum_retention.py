"""``manage.py nexum_retention [--project SLUG] [--dry-run]``: apply each project's retention policy now
(``context_app.compilation.retention``), printing what it pruned (or, dry, would prune) and the bytes freed.
The dispatcher's pass runs the same every ``NEXUM_RETENTION_INTERVAL_S``; this is for an operator who wants
it now, or wants to see what a policy would prune before setting it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from context_app.compilation.retention import PruneSummary, effective_policy, project_prune
from nexum.core.errors import DomainError
from tasks_app.models import Project


class Command(BaseCommand):
    help = "Prune stored contexts, bundles and check output older than each project's retention policy."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--project", default=None, help="only this project (its slug); default: all")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be pruned; write nothing"
        )

    def handle(self, *args, project: str | None = None, dry_run: bool = False, **options):  # type: ignore[no-untyped-def]
        projects = Project.objects.order_by("slug")
        if project is not None:
            projects = projects.filter(slug=project)
            if not projects.exists():
                raise CommandError(f"no project with slug {project!r}")
        total = 0
        for target in projects:
            try:
                policy = effective_policy(target)
                if all(days is None for days in policy.values()):
                    self.stdout.write(f"{target.slug}: no retention policy (kept for ever)")
                    continue
                summary = project_prune(project_id=str(target.id), dry_run=dry_run)
            except DomainError as error:
                raise CommandError(f"{target.slug}: {error.message}") from error
            self.stdout.write(f"{target.slug}: {_describe(summary, policy)}")
            total += summary.bytes_freed
        verb = "would free" if dry_run else "freed"
        self.stdout.write(f"{verb} {total} bytes in all")


def _describe(summary: PruneSummary, policy: dict[str, int | None]) -> str:
    verb = "would prune" if summary.dry_run else "pruned"
    parts = []
    for kind, count in (
        ("contexts", summary.contexts),
        ("bundles", summary.bundles),
        ("check_output", summary.check_output),
    ):
        days = policy[kind]
        kept = "kept for ever" if days is None else f"older than {days} days"
        parts.append(f"{count.count} {kind} ({kept}, {count.bytes_freed} bytes)")
    return f"{verb} " + ", ".join(parts)
