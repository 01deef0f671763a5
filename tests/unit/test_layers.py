"""The layer contracts (pyproject.toml, ``[tool.importlinter]``) catch an upward import.

``lint-imports`` runs on the tree in ``make test``; here it runs on a copy of the packages twice: as they
are (kept), then with one upward import planted (broken, naming the import).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nexum", "nexum_web", "tasks_app", "context_app", "verification_app")
LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # Run in the copy, so the copy's packages are the ones analysed (the current directory comes first).
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS], cwd=tree, capture_output=True, text=True, timeout=120
    )


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    kept = lint_imports(tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr

    # tasks sits below verification: the gate may call the task lifecycle, never the other way round.
    selectors = tmp_path / "tasks_app" / "selectors.py"
    selectors.write_text(selectors.read_text() + "\nfrom verification_app import services as planted\n")
    broken = lint_imports(tmp_path)
    assert broken.returncode != 0
    assert "tasks_app is not allowed to import verification_app" in broken.stdout
    assert "tasks_app.selectors -> verification_app.services" in broken.stdout
