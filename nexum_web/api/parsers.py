"""The one request parser of the API: JSON, refused (400 ``malformed_request``) when nested too deep.

Python's JSON decoder recurses once per level of nesting, so a body nested a thousand deep would end in a
``RecursionError`` inside the parser. The depth is measured first, by a linear scan of the text with its
strings left out, and the decoder only ever sees bodies within the limit.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

MAX_JSON_DEPTH = 64

# A JSON string literal (its brackets are content, not structure). The closing quote is optional, so a match
# never fails once started and the scan stays linear even on an unterminated string (which fails to decode).
_STRING_LITERAL = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nested_deeper_than(text: str, limit: int) -> bool:
    """Whether the arrays and objects of a JSON text nest more than ``limit`` levels deep."""
    structure = _NOT_A_BRACKET.sub("", _STRING_LITERAL.sub("", text))
    if structure.count("[") + structure.count("{") <= limit:
        return False  # it cannot nest deeper than it has openings
    return max(accumulate(map(_NESTING_STEP.__getitem__, structure))) > limit


class DepthLimitedJSONParser(JSONParser):
    """DRF's JSON parser, refusing a body nested deeper than ``MAX_JSON_DEPTH`` before decoding it."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as error:
            raise ParseError(f"JSON parse error - {error}") from None
        if nested_deeper_than(text, MAX_JSON_DEPTH):
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is refused")
        try:
            return json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
