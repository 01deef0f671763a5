"""What the management commands print: a refused input as a ``CommandError`` (exit status 1 on the command
line) naming the error's code and the field at fault, as the API's error body does; lists as aligned
columns."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.base import CommandError

from nexum.core.errors import DomainError


def command_error(error: DomainError) -> CommandError:
    field = f" [{error.field}]" if error.field else ""
    return CommandError(f"{error.code}{field}: {error.message}")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``rows`` under ``header`` in columns two spaces apart."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
