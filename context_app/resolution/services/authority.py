"""Who may write what (SPEC R3, R4): every write that creates or changes a grant, a source, an escalation's
outcome, the plan gate or a task's state takes ``content_trust`` (the trust class of the content the request
derives from) and ``derived_from`` (digests of bundle items it derives from) and refuses, with
``require_authority``, anything that rests on content below ``repository_authored``. An unknown digest counts
as untrusted.
"""

from __future__ import annotations

from collections.abc import Iterable

from context_app.resolution.models import BundleItem
from nexum.core.errors import ValidationFailed
from nexum.core.trust import TrustClass, require_authority


def content_trust_of(
    *, project_id: str, content_trust: TrustClass | str | None = None, derived_from: Iterable[str] = ()
) -> list[TrustClass]:
    """The trust classes of what a request derives from: ``content_trust`` and the classes of the bundle
    items named by ``derived_from`` (an unknown digest counts as ``untrusted_retrieved``)."""
    classes = []
    if content_trust is not None:
        classes.append(TrustClass.parse(content_trust, field="content_trust"))
    digests = list(dict.fromkeys(derived_from))
    if digests:
        if not all(isinstance(d, str) for d in digests):
            raise ValidationFailed("derived_from lists item digests", field="derived_from")
        known: dict[str, TrustClass] = {}
        for digest, trust in BundleItem.objects.filter(project_id=project_id, digest__in=digests).values_list(
            "digest", "trust_class"
        ):
            current = TrustClass.parse(trust)
            known[digest] = min(known.get(digest, current), current)
        classes += [known.get(digest, TrustClass.untrusted_retrieved) for digest in digests]
    return classes


def require_content_authority(
    *,
    project_id: str,
    action: str,
    content_trust: TrustClass | str | None = None,
    derived_from: Iterable[str] = (),
) -> tuple[str, ...]:
    """Refuse ``action`` when it derives from content below ``repository_authored`` (R4); returns the
    digests it derives from, for the record."""
    digests = tuple(dict.fromkeys(derived_from))
    classes = content_trust_of(project_id=project_id, content_trust=content_trust, derived_from=digests)
    if classes:
        require_authority(classes, action)
    return digests
