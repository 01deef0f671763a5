"""The layout's rules that a reader cannot see from one file (issue 25): no module past 600 lines, and no
import inside a function that hides a cycle. Every import below module level is in ``ALLOWED``, with why."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600

ALLOWED = {
    ("config/apps.py", "config.bootstrap"): "Django runs ready() once every app is loaded: wiring needs them",
    ("context_app/compilation/tasks.py", "context_app.compilation.services.requests"): (
        "a task imports the service it runs in its body; the service imports the task (HackSoft's direction)"
    ),
    ("context_app/resolution/tasks.py", "context_app.resolution.services.resolve_requests"): (
        "a task imports the service it runs in its body; the service imports the task (HackSoft's direction)"
    ),
    ("verification_app/tasks.py", "verification_app.services.completion_runs"): (
        "a task imports the service it runs in its body; the service imports the task (HackSoft's direction)"
    ),
    ("nexum/adapters/embedding.py", "numpy"): "the embedder's libraries load when it is built, not on import",
    ("nexum/adapters/embedding.py", "wordllama"): "the embedder's libraries load when it is built",
    ("nexum/adapters/embedding.py", "safetensors.numpy"): "the embedder's libraries load when it is built",
    ("nexum/adapters/embedding.py", "tokenizers"): "the embedder's libraries load when it is built",
    ("nexum/adapters/telemetry.py", "opentelemetry"): "OpenTelemetry loads only when tracing is on",
    ("nexum/adapters/telemetry.py", "opentelemetry.exporter.otlp.proto.http.trace_exporter"): (
        "OpenTelemetry loads only when tracing is on"
    ),
    ("nexum/adapters/telemetry.py", "opentelemetry.sdk.trace.export"): "OpenTelemetry loads only when on",
    ("nexum/adapters/telemetry.py", "opentelemetry.sdk.resources"): "OpenTelemetry loads only when on",
    ("nexum/adapters/telemetry.py", "opentelemetry.sdk.trace"): "OpenTelemetry loads only when on",
    ("nexum/adapters/telemetry.py", "opentelemetry.instrumentation.celery"): "loads only when tracing is on",
    ("nexum/adapters/telemetry.py", "opentelemetry.instrumentation.django"): "loads only when tracing is on",
    ("nexum/adapters/telemetry.py", "opentelemetry.instrumentation.psycopg"): "loads only when tracing is on",
    (
        "nexum/adapters/tokenization.py",
        "tokenizers",
    ): "a Hugging Face tokenizer file loads its library on use",
    ("nexum/adapters/tokenization.py", "django.conf"): (
        "the adapter imports no Django when imported (unit-testable without it); the registry reads the "
        "operator's encoding files from settings on first use"
    ),
    ("nexum/eventstore/replica.py", "nexum.eventstore.models"): (
        "the database router's module is loaded by Django's database layer, before models may be imported"
    ),
}


def python_modules() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if not name.startswith("tests/")]


def imports_below_module_level(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    found.append((inner.module or "", inner.lineno))
                elif isinstance(inner, ast.Import):
                    found += [(alias.name, inner.lineno) for alias in inner.names]
    return found


def test_no_module_is_over_600_lines():
    long = {
        name: lines
        for name in python_modules()
        if "/migrations/" not in name and (lines := len((ROOT / name).read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concern (docs/ARCHITECTURE.md): {long}"


def test_no_import_below_module_level_but_the_allowed_ones():
    found = set()
    for name in python_modules():
        if "/migrations/" in name or name.startswith(("bench/", "examples/", "clients/")):
            continue
        for module, line in imports_below_module_level(ast.parse((ROOT / name).read_text())):
            assert (name, module) in ALLOWED, (
                f"{name}:{line} imports {module} inside a function: import it at module level (a cycle is a "
                "layering mistake to remove), or add it to ALLOWED with why"
            )
            found.add((name, module))
    assert found == set(ALLOWED), f"no longer imported inside a function: {sorted(set(ALLOWED) - found)}"
