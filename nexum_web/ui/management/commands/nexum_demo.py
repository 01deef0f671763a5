"""Prepare a development instance: a local admin user, the demo project with two known tokens (the agent's
and the operator's), and the demo world (``load_demo_world``: the auth-spec goal, its tasks, sources, checks,
compiles and escalations, written as those two would write them).

Idempotent: running it again changes nothing. Refuses to run with NEXUM_DEBUG off.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from nexum.core.roles import AGENT, OPERATOR
from nexum_web.ui.demo import AGENT_NAME, OPERATOR_NAME, load_demo_world
from tasks_app.models import AgentToken, Project
from tasks_app.services import agent_token_issue, hash_key, project_create

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"


class Command(BaseCommand):
    help = "Create the development admin user and the demo project (idempotent; development only)."

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        if not settings.DEBUG:
            raise CommandError("nexum_demo creates well-known credentials; it runs only with NEXUM_DEBUG on")
        users = get_user_model()
        if not users.objects.filter(username=ADMIN_USERNAME).exists():
            users.objects.create_superuser(ADMIN_USERNAME, "admin@localhost", ADMIN_PASSWORD)
        project = Project.objects.filter(slug="demo").first() or project_create(
            slug="demo", name="Demo", description="A demo world for trying Nexum", actor="nexum_demo"
        )
        tokens = {
            AGENT: (AGENT_NAME, settings.NEXUM_DEMO_TOKEN),
            OPERATOR: (OPERATOR_NAME, settings.NEXUM_DEMO_OPERATOR_TOKEN),
        }
        for role, (name, key) in tokens.items():
            if not AgentToken.objects.filter(key_sha256=hash_key(key)).exists():
                agent_token_issue(
                    project_id=str(project.id), name=name, role=role, key=key, actor="nexum_demo"
                )
        world = load_demo_world(log=lambda line: self.stdout.write(f"  {line}"))
        states = ", ".join(f"{key} {task.state}" for key, task in sorted(world.tasks.items()))
        self.stdout.write(
            f"admin login: {ADMIN_USERNAME} / {ADMIN_PASSWORD} (development only)\n"
            f"demo project: {project.slug}\n"
            f"  agent token:    {tokens[AGENT][1]} (records, compiles, resolves, starts, asks the gate)\n"
            f"  operator token: {tokens[OPERATOR][1]} (contracts, sources, grants, catalog, escalations)\n"
            f"demo world: {world.goal.objective} ({states})"
        )
