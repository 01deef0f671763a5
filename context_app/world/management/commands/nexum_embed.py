"""Give the facts and tool calls stored before vectors existed (or under another ``NEXUM_EMBEDDER``) their
vectors by the configured embedder, and their named entities, in batches (each committed on its own).
Idempotent: items that have both are left alone, so running it again writes nothing."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from context_app.world.embedder import configured_embedder, embedder_setting
from context_app.world.vectors import FILL_BATCH, fill_entities, fill_vectors
from nexum.adapters.embedding import embedder_id
from nexum.core.errors import DomainError
from tasks_app.models import Project


class Command(BaseCommand):
    help = "Store vectors (by NEXUM_EMBEDDER) and entities for facts and tool calls that lack them."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--project", default=None, help="only this project (its slug); default: all")
        parser.add_argument("--batch", type=int, default=FILL_BATCH, help="items per embed call")

    def handle(self, *args, project: str | None = None, batch: int = FILL_BATCH, **options):  # type: ignore[no-untyped-def]
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        project_id = None
        if project is not None:
            target = Project.objects.filter(slug=project).first()
            if target is None:
                raise CommandError(f"no project with slug {project!r}")
            project_id = str(target.id)
        try:
            embedder = configured_embedder()
        except DomainError as error:
            raise CommandError(error.message) from error
        if embedder is None:
            entities = fill_entities(project_id=project_id, batch=batch)
            self.stdout.write(
                f"NEXUM_EMBEDDER is {embedder_setting()!r}: no vectors; entities for {entities} items"
            )
            return
        vectors, entities = fill_vectors(embedder=embedder, project_id=project_id, batch=batch)
        self.stdout.write(
            f"{vectors} vectors stored by {embedder_id(embedder)}; entities for {entities} items"
        )
