"""What ``OPTIONS`` answers on an API endpoint: its name, description and media types, and (``Allow``) its
methods. The request and response shapes are the OpenAPI schema's (``/api/schema/``): DRF's ``actions``
would re-derive them per request by loading the object a ``PUT`` targets, which these views do not expose."""

from __future__ import annotations

from typing import Any

from rest_framework.metadata import SimpleMetadata
from rest_framework.request import Request


class DescriptionMetadata(SimpleMetadata):
    def determine_actions(self, request: Request, view: Any) -> dict[str, Any]:
        return {}
