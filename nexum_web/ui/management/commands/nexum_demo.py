"""Prepare a development instance: a local admin user, the demo project with two known tokens (the agent's
and the operator's), and the demo world (``load_demo_world``: the auth-spec goal, its tasks, sources, checks,
compiles and escalations, written as those two would write them).

Idempotent: running it again changes nothing. ``--reset`` starts the demo over (``make demo-reset`` runs it):
it erases the whole database (``flush``: every project and the event log), puts the demo's workspace copy of
``examples/auth-service`` back, then loads the demo afresh. Refuses to run with NEXUM_DEBUG off.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from nexum.core.roles import AGENT, OPERATOR
from nexum_web.ui.demo import AGENT_NAME, OPERATOR_NAME, load_demo_world, workspace_reset
from tasks_app.models import AgentToken, Project
from tasks_app.services.projects import project_create
from tasks_app.services.tokens import agent_token_issue, hash_key

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"


class Command(BaseCommand):
    help = "Create the development admin user and the demo project (idempotent; development only)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument(
            "--reset",
            action="store_true",
            help="first erase the whole database (every project, the event log) and put the demo's workspace "
            "and published copies of examples/auth-service back: the demo from its start",
        )

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        if not settings.DEBUG:
            raise CommandError("nexum_demo creates well-known credentials; it runs only with NEXUM_DEBUG on")
        if options["reset"]:
            call_command("flush", interactive=False, verbosity=0)
            self.stdout.write(f"  reset: database erased, {workspace_reset()} restored from examples/")
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
