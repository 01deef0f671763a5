"""Fixtures for the operator and human paths: the demo world loaded through the services, a staff user, and
a real browser (Debian's Chromium driven by Playwright; nothing is downloaded)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make between browser
# steps are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("NEXUM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STAFF = ("operator", "operator-password")
SCREENSHOT_DIR = os.environ.get("NEXUM_SCREENSHOTS")  # e.g. "docs": the README's pictures


@pytest.fixture
def demo_settings(settings, tmp_path: Path) -> Path:
    """Where the demo's command check runs (a workspace of its own) and its repository sources read (a
    published folder of its own; both inside the sources' roots, as the default roots are), with this
    interpreter allowed."""
    settings.NEXUM_WORKSPACE_ROOT = tmp_path / "workspace"
    settings.NEXUM_PUBLISHED_ROOT = tmp_path / "published"
    settings.NEXUM_SOURCE_ROOTS = [
        tmp_path / "workspace",
        tmp_path / "published",
        Path(settings.BASE_DIR) / "examples",
    ]
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_CHECK_EXECUTABLES = [sys.executable]
    return tmp_path


@pytest.fixture
def demo_world(demo_settings: Path) -> Any:
    from nexum_web.ui.demo import load_demo_world

    return load_demo_world()


@pytest.fixture
def staff_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(
        username=STAFF[0], password=STAFF[1], is_staff=True, is_superuser=True
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium through Playwright's sync API, per module: while it runs, its event loop counts as running in
    this thread, so a later test's ``asyncio.run`` (the framework adapters') would fail if it lived on."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (.ci/run installs Debian's chromium)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def log_in(page: Any, base_url: str) -> None:
    page.goto(f"{base_url}/admin/login/")
    page.fill("#id_username", STAFF[0])
    page.fill("#id_password", STAFF[1])
    page.click("input[type=submit]")
    page.wait_for_selector("#nexum-dashboard")


def screenshot(page: Any, name: str) -> None:
    if SCREENSHOT_DIR:
        Path(SCREENSHOT_DIR).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOT_DIR) / name), full_page=True)
