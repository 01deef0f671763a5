"""What the source confinement tests share: a server's folders laid out as the defaults do, and a local JSON
server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SERVED_TEXT = "served from the test server"


def server_folders(root: Path) -> dict[str, Path]:
    """Under ``root``: the data directory holding the SQLite file, the artifact store and the workspace root
    (projects ``acme`` with a ``repo`` and ``globex``), an examples folder, and a secret outside them all."""
    data = root / "data"
    places = {
        "data": data,
        "artifacts": data / "artifacts",
        "workspace": data / "workspace",
        "acme": data / "workspace" / "acme",
        "globex": data / "workspace" / "globex",
        "examples": root / "repo" / "examples",
        "outside": root / "outside",
    }
    for path in places.values():
        path.mkdir(parents=True, exist_ok=True)
    (places["acme"] / "repo").mkdir()
    (places["acme"] / "repo" / "deploy.md").write_text("# Deploy\n\nDeploy with make release.\n")
    (places["globex"] / "plans.md").write_text("# Plans\n\nGlobex merger plans.\n")
    (places["outside"] / "secret.md").write_text("# Secret\n\nDeploy secret: hunter2\n")
    (places["artifacts"] / "ab").mkdir()
    (places["artifacts"] / "ab" / "blob").write_text("stored content\n")
    (data / "nexum.sqlite3").write_text("db")
    return places


class _Handler(BaseHTTPRequestHandler):
    """``/redirect-in`` redirects to ``/items`` on the same host, ``/redirect-out`` to ``localhost``; every
    other path answers one item. Each request's path and Host header are kept in ``server.requests``."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.get("Host")))  # type: ignore[attr-defined]
        if self.path.startswith("/redirect-out"):
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/items")
            self.end_headers()
            return
        if self.path.startswith("/redirect-in"):
            self.send_response(302)
            self.send_header("Location", "/items")
            self.end_headers()
            return
        body = json.dumps([{"subject": "s", "text": SERVED_TEXT}]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def json_server() -> Iterator[ThreadingHTTPServer]:
    """A JSON server on 127.0.0.1 (a free port), stopped on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
