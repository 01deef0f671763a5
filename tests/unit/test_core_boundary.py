"""The core stays framework-free: no module under nexum/core imports Django, DRF, Celery, a tokenizer or a
tracer (the compiler takes a phase timer, ``nexum.adapters.telemetry.phase_span``, from its caller)."""

import ast
from pathlib import Path

FORBIDDEN = {
    "django",
    "rest_framework",
    "celery",
    "tiktoken",
    "tokenizers",
    "kombu",
    "psycopg",
    "opentelemetry",
}
CORE = Path(__file__).resolve().parents[2] / "nexum" / "core"


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_no_framework():
    modules = sorted(CORE.rglob("*.py"))
    assert modules, "the core package is missing"
    offenders = {
        str(path.relative_to(CORE)): sorted(imported_roots(path) & FORBIDDEN)
        for path in modules
        if imported_roots(path) & FORBIDDEN
    }
    assert offenders == {}


def test_core_imports_nothing_from_the_apps():
    apps = {"tasks_app", "context_app", "verification_app"}
    for path in CORE.rglob("*.py"):
        assert not imported_roots(path) & apps, path
        source = path.read_text()
        assert "nexum.eventstore" not in source and "nexum_web.api" not in source, path
