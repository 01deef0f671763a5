"""The per-method declarations a view makes (``operator_only``, ``query_serializers``), read one way.

Django's ``View`` answers HEAD with the GET handler (``View.setup`` sets ``head = get``), so HEAD is a GET
without its body and every rule declared for GET (who may call it, which query it takes) is HEAD's rule too.
Looked up by the raw method, HEAD would find no rule and skip them: an agent's ``HEAD /webhooks`` answered
200 with the operator's body length where GET is 403.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def handler_method(method: str) -> str:
    """The method whose handler answers ``method``: GET for HEAD, else the method itself."""
    method = method.upper()
    return "GET" if method == "HEAD" else method


def declared_for(view: object, declarations: str, method: str) -> Any | None:
    """What ``view`` declares in its ``declarations`` mapping for the handler of ``method``, if anything."""
    declared: Mapping[str, Any] = getattr(view, declarations, {})
    return declared.get(handler_method(method))
