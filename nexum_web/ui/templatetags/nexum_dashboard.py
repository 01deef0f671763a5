"""``{% nexum_dashboard %}``: the operators' overview on the admin index (stuck requests, open escalations,
running and blocked tasks, recent compiles and gate decisions)."""

from __future__ import annotations

from typing import Any

from django import template

from nexum_web.ui import selectors

register = template.Library()


@register.inclusion_tag("admin/nexum_dashboard.html")
def nexum_dashboard() -> dict[str, Any]:
    return selectors.dashboard()
