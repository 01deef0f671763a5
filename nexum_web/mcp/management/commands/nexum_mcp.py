"""``manage.py nexum_mcp --token <token>``: serve Nexum's MCP tools over stdio, for desktop agents that
launch their MCP servers as subprocesses. Every call is made with the token, as over HTTP."""

from __future__ import annotations

import os
from typing import Any

import anyio
from django.core.management.base import BaseCommand, CommandError, CommandParser

from nexum_web.mcp.calls import Caller
from nexum_web.mcp.server import serve_stdio
from tasks_app.models import AgentToken
from tasks_app.services.tokens import hash_key


class Command(BaseCommand):
    help = "Serve the MCP tools on stdin/stdout for one agent or operator token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--token",
            default=os.environ.get("NEXUM_MCP_TOKEN"),
            help="the API token every call is made with (default: $NEXUM_MCP_TOKEN)",
        )

    def handle(self, *args: Any, token: str | None, **options: Any) -> None:
        if not token:
            raise CommandError("give --token or set NEXUM_MCP_TOKEN")
        if not AgentToken.objects.filter(key_sha256=hash_key(token), revoked_at__isnull=True).exists():
            raise CommandError("unknown or revoked token")
        anyio.run(serve_stdio, Caller(token=token, own_connections=True))
