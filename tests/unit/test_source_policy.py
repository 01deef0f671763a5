"""Sources confined (issue 12): folders inside the operator's roots, hosts on the operator's allowlist, both
checked when a source is configured and again at every read. No database; HTTP on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from nexum.adapters.source_policy import HostEntry, SourceNotAllowed, SourcePolicy, canonical_host
from nexum.adapters.sources.base import SourceRefused, fetch
from nexum.adapters.sources.folder import FolderSource
from nexum.adapters.sources.http_json import HttpJsonSource
from nexum.adapters.sources.registry import build_source
from nexum.adapters.sources.tickets_json import TicketsJsonSource
from nexum.core.errors import ValidationFailed
from tests.source_fixtures import SERVED_TEXT, json_server, server_folders

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def clock() -> datetime:
    return NOW


@pytest.fixture
def layout(tmp_path) -> dict[str, Path]:
    return server_folders(tmp_path)


@pytest.fixture
def policy(layout) -> SourcePolicy:
    """The default confinement of project ``acme``: the workspace root and examples/ as roots."""
    return SourcePolicy.build(
        roots=[layout["workspace"], layout["examples"]],
        forbidden=[
            ("the data directory", layout["data"]),
            ("the artifact store", layout["artifacts"]),
            ("the workspace root", layout["workspace"]),
            ("the database", layout["data"] / "nexum.sqlite3"),
        ],
        project_workspace=layout["acme"],
    )


def folder(policy: SourcePolicy, path: object) -> FolderSource:
    return build_source("folder", "repo", {"path": path}, policy=policy, clock=clock)  # type: ignore[return-value]


# --- folders at configuration time ------------------------------------------------------------------------


def test_the_projects_own_workspace_examples_and_relative_paths_are_allowed(policy, layout):
    assert folder(policy, str(layout["acme"])).root == layout["acme"].resolve()
    assert folder(policy, str(layout["examples"])).root == layout["examples"].resolve()
    assert folder(policy, "repo").root == (layout["acme"] / "repo").resolve()  # from the own workspace


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("/etc", "outside the source roots"),
        ("../..", "climbs out"),
        ("../../../../etc", "climbs out"),
        ("{acme}/../globex", "climbs out"),
        ("{data}", "outside the source roots"),
        ("{workspace}", "inside the workspace root"),
        ("{globex}", "inside the workspace root"),
        ("{artifacts}", "outside the source roots"),
        ("{outside}", "outside the source roots"),
    ],
)
def test_a_folder_outside_the_roots_is_refused_naming_the_option(policy, layout, where, reason):
    path = where.format(**{name: str(place) for name, place in layout.items()})
    with pytest.raises(SourceNotAllowed) as refused:
        folder(policy, path)
    assert refused.value.field == "path" and refused.value.code == "source_not_allowed"
    assert reason in refused.value.message
    assert refused.value.details == {"setting": "NEXUM_SOURCE_ROOTS"}


def test_forbidden_places_stay_forbidden_even_when_an_operator_lists_a_root_around_them(layout):
    policy = SourcePolicy.build(
        roots=[layout["data"].parent],
        forbidden=[("the data directory", layout["data"]), ("the artifact store", layout["artifacts"])],
    )
    for where, reason in [
        (layout["data"], "inside the data directory"),
        (layout["artifacts"] / "ab", "inside the artifact store"),
        (layout["data"].parent, "contains the data directory"),
    ]:
        with pytest.raises(SourceNotAllowed, match=reason):
            folder(policy, str(where))


def test_a_symlink_inside_a_root_that_points_out_is_refused_when_configured(policy, layout):
    (layout["acme"] / "etc").symlink_to("/etc", target_is_directory=True)
    (layout["acme"] / "neighbour").symlink_to(layout["globex"], target_is_directory=True)
    (layout["acme"] / "store").symlink_to(layout["artifacts"], target_is_directory=True)
    for name in ("etc", "neighbour", "store"):
        with pytest.raises(SourceNotAllowed):
            folder(policy, str(layout["acme"] / name))


def test_a_refusal_does_not_tell_whether_the_path_exists(policy):
    messages = set()
    for path in ("/etc", "/no/such/folder"):
        with pytest.raises(SourceNotAllowed) as refused:
            folder(policy, path)
        messages.add(refused.value.message.replace(path, "<path>"))
    assert len(messages) == 1


def test_a_tickets_file_is_confined_the_same_way(policy, layout):
    (layout["acme"] / "t.json").write_text(json.dumps([{"id": "1", "text": "deploy port 8080"}]))
    source = build_source("tickets_json", "t", {"path": "t.json"}, policy=policy, clock=clock)
    assert source.retrieve("deploy", ["*"], 5)[0].text == "deploy port 8080"
    for path in ("/etc/passwd", str(layout["data"] / "nexum.sqlite3"), "../globex/plans.md"):
        with pytest.raises(SourceNotAllowed):
            build_source("tickets_json", "t", {"path": path}, policy=policy, clock=clock)


# --- files at retrieve time -------------------------------------------------------------------------------


def test_a_symlink_planted_after_configuration_is_not_followed(policy, layout):
    source = folder(policy, str(layout["acme"]))
    (layout["acme"] / "leak.md").symlink_to(layout["outside"] / "secret.md")
    (layout["acme"] / "neighbour.md").symlink_to(layout["globex"] / "plans.md")
    (layout["acme"] / "blob.md").symlink_to(layout["artifacts"] / "ab" / "blob")
    texts = " ".join(item.text for item in source.retrieve("", ["*"], 100))
    assert "make release" in texts
    assert "hunter2" not in texts and "merger" not in texts and "stored content" not in texts
    with pytest.raises(ValidationFailed):
        source.read("leak.md")


def test_a_file_swapped_for_a_symlink_between_walk_and_read_is_caught_on_the_descriptor(policy, layout):
    source = folder(policy, str(layout["acme"]))
    walked = list(source._files())
    notes = layout["acme"] / "repo" / "deploy.md"
    notes.unlink()
    notes.symlink_to(layout["outside"] / "secret.md")
    assert [source._read_text(path) for _relative, path in walked] == [None]


def test_a_fifo_in_a_folder_is_skipped_without_blocking(policy, layout):
    os.mkfifo(layout["acme"] / "pipe.md")
    source = folder(policy, str(layout["acme"]))
    started = time.monotonic()
    assert [item.locator.split("#")[0] for item in source.retrieve("", ["*"], 10)] == ["repo/deploy.md"]
    assert time.monotonic() - started < 5


def test_a_folder_replaced_by_a_symlink_out_is_refused_when_it_is_built_again(policy, layout):
    repo = layout["acme"] / "repo"
    folder(policy, str(repo))
    (repo / "deploy.md").unlink()
    repo.rmdir()
    repo.symlink_to(layout["outside"], target_is_directory=True)
    with pytest.raises(SourceNotAllowed):
        folder(policy, str(repo))


def test_a_tickets_file_swapped_for_a_symlink_out_is_a_refused_retrieval(policy, layout):
    tickets = layout["acme"] / "t.json"
    tickets.write_text(json.dumps([{"id": "1", "text": "deploy"}]))
    source = TicketsJsonSource("t", tickets, policy=policy, clock=clock)
    tickets.unlink()
    tickets.symlink_to(layout["outside"] / "secret.md")
    with pytest.raises(SourceRefused):
        source.retrieve("", ["*"], 5)
    result = fetch(source, "", ["*"], 5)
    assert result.error_kind == "refused" and "hunter2" not in (result.error or "")


# --- hosts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("LocalHost.", "localhost"),
        ("feeds.example.com", "feeds.example.com"),
    ],
)
def test_hosts_compare_in_canonical_form(written, canonical):
    assert canonical_host(written) == canonical


def test_allowlist_entries_parse_hosts_and_ports():
    assert HostEntry.parse("127.0.0.1:8080") == HostEntry("127.0.0.1", 8080)
    assert HostEntry.parse("[::1]:99") == HostEntry("::1", 99)
    assert HostEntry.parse("::1") == HostEntry("::1", None)
    assert HostEntry.parse("Feeds.Example.com") == HostEntry("feeds.example.com", None)
    for malformed in ("[::1", "host:0", "host:http", "two words", ""):
        with pytest.raises(ValueError):
            HostEntry.parse(malformed)


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    with json_server() as running:
        yield running


def http_source(policy: SourcePolicy, url: str) -> HttpJsonSource:
    return build_source("http_json", "web", {"url": url, "timeout": 2}, policy=policy, clock=clock)  # type: ignore[return-value]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "0.0.0.0", "[::1]", "127.1", "2130706433", "0x7f000001", "[::ffff:127.0.0.1]",
     "[::]", "169.254.169.254", "10.0.0.1", "192.168.1.1", "[fe80::1]", "metadata.internal"],
)  # fmt: skip
def test_a_host_not_on_the_allowlist_is_refused_when_configured(server, host):
    port = server.server_address[1]
    with pytest.raises(SourceNotAllowed) as refused:
        http_source(SourcePolicy(), f"http://{host}:{port}/items")
    assert refused.value.field == "url" and refused.value.details == {"setting": "NEXUM_SOURCE_HTTP_ALLOW"}
    assert server.requests == []  # nothing was contacted


def test_a_refusal_does_not_tell_an_open_port_from_a_closed_one(server):
    open_port, closed_port = server.server_address[1], 9  # the discard port: nothing listens
    messages = set()
    for port in (open_port, closed_port):
        with pytest.raises(SourceNotAllowed) as refused:
            http_source(SourcePolicy(), f"http://127.0.0.1:{port}/items")
        messages.add(refused.value.message.replace(str(port), "<port>"))
    assert len(messages) == 1


def test_a_listed_loopback_address_is_fetched_in_any_form_but_not_on_another_port(server):
    port = server.server_address[1]
    policy = SourcePolicy.build(http_allow=[f"127.0.0.1:{port}"])
    for host in ("127.0.0.1", "127.1", "2130706433"):
        items = http_source(policy, f"http://{host}:{port}/items").retrieve("", ["*"], 5)
        assert [item.text for item in items] == [SERVED_TEXT]
    with pytest.raises(SourceNotAllowed):
        http_source(policy, f"http://127.0.0.1:{port + 1}/items")


def test_a_listed_name_that_resolves_to_loopback_at_fetch_time_is_refused(server):
    """DNS rebinding: the name was allowed when configured; it now resolves to 127.0.0.1."""
    port = server.server_address[1]
    rebinding = SourcePolicy.build(
        http_allow=["feeds.example.com"], resolve_host=lambda host, port: ["93.184.216.34", "127.0.0.1"]
    )
    source = http_source(rebinding, f"http://feeds.example.com:{port}/items")
    result = fetch(source, "", ["*"], 5)
    assert result.error_kind == "refused" and "non-public address" in (result.error or "")
    assert server.requests == []


def test_a_name_resolving_to_a_listed_address_connects_to_that_address_once_vetted(server):
    port = server.server_address[1]
    policy = SourcePolicy.build(
        http_allow=["feeds.example.com", f"127.0.0.1:{port}"], resolve_host=lambda host, port: ["127.0.0.1"]
    )
    items = http_source(policy, f"http://feeds.example.com:{port}/items").retrieve("", ["*"], 5)
    assert items and server.requests[-1][1] == f"feeds.example.com:{port}"


def test_redirects_are_followed_only_to_allowed_hosts(server):
    port = server.server_address[1]
    policy = SourcePolicy.build(http_allow=[f"127.0.0.1:{port}"])
    assert http_source(policy, f"http://127.0.0.1:{port}/redirect-in").retrieve("", ["*"], 5)
    result = fetch(http_source(policy, f"http://127.0.0.1:{port}/redirect-out"), "", ["*"], 5)
    assert result.error_kind == "refused" and "redirect refused" in (result.error or "")
    assert [path for path, _host in server.requests] == ["/redirect-in?q=&limit=5&scope=%2A", "/items",
                                                         "/redirect-out?q=&limit=5&scope=%2A"]  # fmt: skip


def test_a_connection_failure_names_no_cause(server):
    policy = SourcePolicy.build(http_allow=["127.0.0.1"])
    result = fetch(http_source(policy, "http://127.0.0.1:9/items"), "", ["*"], 5)
    assert result.error_kind == "unreachable"
    assert result.error == "cannot connect to 127.0.0.1:9"
