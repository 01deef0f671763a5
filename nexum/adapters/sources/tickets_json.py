"""``tickets_json``: a JSON file of tickets."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from nexum.adapters.source_policy import ConfinementRefused, SourcePolicy
from nexum.adapters.sources.base import (
    Clock,
    SourceFailure,
    SourcePlugin,
    SourceRefused,
    SourceResponseRejected,
    SourceUnavailable,
    labels_of,
    match_score,
    parse_observed_at,
    query_terms,
    record_claim,
    utc_now,
)
from nexum.adapters.sources.registry import source_kind
from nexum.core.digests import sha256_hex
from nexum.core.errors import ValidationFailed
from nexum.core.resolution.model import (
    ANY_SCOPE,
    Freshness,
    RetrievedItem,
)
from nexum.core.trust import TrustClass


@source_kind("tickets_json")
class TicketsJsonSource(SourcePlugin):
    """A JSON file of tickets: a list, or ``{"tickets": [...]}``. Each ticket: ``id`` (required), ``title``,
    ``body`` or ``description``, ``status``, ``labels``, ``project``, ``updated_at`` (ISO, used as
    observed-at), optional ``subject`` (default ``ticket:<id>``), ``text`` (else title + body + status),
    ``trust_class`` and ``signature``. Scopes: ``*``, ``project:<p>``, ``label:<l>``, ``status:<s>``."""

    allowed_trust = frozenset(
        {TrustClass.untrusted_retrieved, TrustClass.repository_authored, TrustClass.signed_skill,
         TrustClass.signed_policy}
    )  # fmt: skip
    config_keys = SourcePlugin.config_keys | {"path", "max_bytes"}

    def __init__(
        self,
        name: str,
        path: str | os.PathLike[str],
        *,
        policy: SourcePolicy,
        max_bytes: int = 8 * 1024 * 1024,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.policy = policy
        self.path = policy.confine_path(path, option="path", as_folder=False)
        self.written_by(policy.writer_of(self.path))
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationFailed("max_bytes must be a positive integer", field="max_bytes")
        self.max_bytes = max_bytes

    @classmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> SourcePlugin:
        options = cls.common_options(config, default_freshness=Freshness(track_revision=True))
        if not isinstance(config.get("path"), str):
            raise ValidationFailed("a tickets_json source needs a path", field="path")
        extra = {"max_bytes": config["max_bytes"]} if "max_bytes" in config else {}
        return cls(name, config["path"], policy=policy, clock=clock, **extra, **options)

    def _read(self) -> bytes:
        """The file's bytes, read only where the policy allows (checked on the file actually opened)."""
        try:
            with self.policy.open_file(self.path) as handle:
                data = handle.read(self.max_bytes + 1)
        except ConfinementRefused as refusal:
            raise SourceRefused(self.name, str(refusal)) from None
        except OSError as exc:
            raise SourceUnavailable(
                self.name, f"cannot read {self.path.name}: {exc.strerror or exc}"
            ) from exc
        if len(data) > self.max_bytes:
            raise SourceResponseRejected(
                self.name, f"{self.path.name} exceeds {self.max_bytes} bytes", kind="too_large"
            )
        return data

    def _load(self) -> tuple[bytes, list[dict[str, Any]]]:
        data = self._read()
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise SourceResponseRejected(self.name, f"{self.path.name} is not valid JSON: {exc}") from exc
        tickets = document.get("tickets") if isinstance(document, dict) else document
        if not isinstance(tickets, list):
            raise SourceResponseRejected(self.name, 'expected a list of tickets or {"tickets": [...]}')
        return data, [t for t in tickets if isinstance(t, dict) and t.get("id") not in (None, "")]

    def current_revision(self) -> str | None:
        try:
            return "sha256:" + sha256_hex(self._read())
        except SourceFailure:
            return None

    @staticmethod
    def _in_scope(ticket: Mapping[str, Any], scope: str) -> bool:
        if scope == ANY_SCOPE:
            return True
        kind, _, value = scope.partition(":")
        labels = ticket.get("labels") or []
        if kind == "label":
            return isinstance(labels, list) and value in labels
        if kind == "status":
            return str(ticket.get("status", "")) == value
        if kind == "project":
            return str(ticket.get("project", "")) == value
        return False

    @staticmethod
    def ticket_text(ticket: Mapping[str, Any]) -> str:
        if isinstance(ticket.get("text"), str):
            return ticket["text"]
        parts = [
            str(ticket.get("title") or "").strip(),
            str(ticket.get("body") or ticket.get("description") or ""),
        ]
        if ticket.get("status"):
            parts.append(f"Status: {ticket['status']}")
        return "\n\n".join(part for part in parts if part.strip())

    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        limit = self._validate_limit(limit)
        checked = self._validate_scopes(scopes)
        data, tickets = self._load()
        revision = "sha256:" + sha256_hex(data)
        terms = query_terms(query or "")
        scored = []
        for ticket in tickets:
            if not any(self._in_scope(ticket, scope) for scope in checked):
                continue
            text = self.ticket_text(ticket)
            if not text.strip():
                continue
            ticket_id = str(ticket["id"])
            score = match_score(terms, text, bonus_text=ticket_id)
            if terms and score == 0:
                continue
            scored.append((-score, ticket_id, ticket, text))
        scored.sort(key=lambda entry: (entry[0], entry[1]))
        items = []
        for _score, ticket_id, ticket, text in scored[:limit]:
            claimed, signature = record_claim(ticket)
            trust = min(claimed, self.highest_trust) if claimed is not None else self.highest_trust
            subject = (
                ticket.get("subject") if isinstance(ticket.get("subject"), str) else f"ticket:{ticket_id}"
            )
            items.append(
                RetrievedItem(
                    source=self.name,
                    locator=f"{self.path.name}#{ticket_id}",
                    revision=revision,
                    text=text,
                    trust_class=claimed if claimed is not None else self.highest_trust,
                    observed_at=parse_observed_at(ticket.get("updated_at"), self.clock),
                    subject=subject,
                    claim=ticket["claim"] if isinstance(ticket.get("claim"), str) else "",
                    signature=signature,
                    labels=labels_of(text, trust),
                )
            )
        return items
