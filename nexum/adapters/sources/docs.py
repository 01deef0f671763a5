"""``docs``: a folder of Markdown, one item per section; the subject is the heading path."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from nexum.adapters.sources.folder import FolderSource
from nexum.adapters.sources.registry import source_kind

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def _slug(title: str) -> str:
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title.casefold()).strip()) or "section"


def split_markdown(text: str) -> list[tuple[tuple[str, ...], str]]:
    """Split Markdown into (heading path, section text) by ATX and setext headings. Headings inside fenced
    code blocks and YAML front matter are ignored; text before the first heading has an empty path."""
    lines = text.splitlines(keepends=True)
    sections: list[tuple[tuple[str, ...], list[str]]] = [((), [])]
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    index = 0
    if lines and lines[0].rstrip("\r\n") == "---":  # front matter stays in the preamble
        closing = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r\n") in ("---", "...")), None)
        if closing is not None:
            sections[0][1].extend(lines[: closing + 1])
            index = closing + 1
    while index < len(lines):
        line = lines[index]
        stripped = line.rstrip("\r\n")
        fence_match = _FENCE.match(stripped)
        heading: tuple[int, str] | None = None
        consumed = 1
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
        elif fence is None:
            atx = _ATX_HEADING.match(stripped)
            following = lines[index + 1].rstrip("\r\n") if index + 1 < len(lines) else ""
            previous_blank = (
                index == 0
                or not lines[index - 1].strip()
                or bool(sections[-1][0] and len(sections[-1][1]) <= 2)
            )
            if atx:
                heading = (len(atx.group(1)), atx.group(2).strip())
            elif (
                stripped.strip()
                and _SETEXT.match(following)
                and previous_blank
                and not stripped.lstrip().startswith(("-", "*", "+", ">", "|", "    "))
            ):
                heading = (1 if following.strip().startswith("=") else 2, stripped.strip())
                consumed = 2
        chunk = lines[index : index + consumed]
        if heading is not None:
            level, title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append((tuple(t for _, t in stack), list(chunk)))
        else:
            sections[-1][1].extend(chunk)
        index += consumed
    return [(path, "".join(body)) for path, body in sections]


@source_kind("docs")
class DocsSource(FolderSource):
    """A documentation folder of Markdown: one item per section, subject = heading path (``A > B > C``)."""

    compiles_as = "fact"
    markdown_suffixes = (".md", ".markdown", ".mdx")

    def _files(self) -> Iterator[tuple[str, Path]]:
        for relative, path in super()._files():
            if relative.lower().endswith(self.markdown_suffixes):
                yield relative, path

    def _sections(self, relative: str, text: str) -> Iterator[tuple[str, str, str]]:
        seen: dict[str, int] = {}
        for heading_path, body in split_markdown(text):
            lines = body.splitlines()
            content = lines[1:] if heading_path else lines
            if not "".join(content).strip():
                continue  # a heading with nothing under it, or blank preamble
            anchor = _slug(heading_path[-1]) if heading_path else "preamble"
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            if count:
                anchor = f"{anchor}-{count}"
            subject = " > ".join(heading_path) if heading_path else relative
            yield f"{relative}#{anchor}", subject, body
