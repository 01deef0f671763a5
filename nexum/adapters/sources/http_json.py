"""``http_json``: a JSON endpoint (untrusted_retrieved), size-capped and time-limited, each request to an
address the policy vetted."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from nexum.adapters.pinned_http import PinnedHTTPConnection, PinnedHTTPSConnection
from nexum.adapters.source_policy import DEFAULT_PORTS, ConfinementRefused, SourcePolicy
from nexum.adapters.sources.base import (
    Clock,
    SourcePlugin,
    SourceRefused,
    SourceResponseRejected,
    SourceUnavailable,
    labels_of,
    parse_observed_at,
    record_claim,
    utc_now,
)
from nexum.adapters.sources.registry import source_kind
from nexum.core.errors import ValidationFailed
from nexum.core.resolution.model import (
    ANY_SCOPE,
    Freshness,
    RetrievedItem,
)
from nexum.core.trust import TrustClass


@source_kind("http_json")
class HttpJsonSource(SourcePlugin):
    """A JSON endpoint returning a list of ``{subject, text, locator?|url?|id?, claim?, observed_at?}`` (or
    ``{"items": [...]}``). Always ``untrusted_retrieved``. GET ``url?q=<query>&limit=<n>&scope=<s>…`` with a
    total deadline of ``timeout`` seconds and a cap of ``max_bytes`` on the body; a timeout or a connection
    error raises ``SourceUnavailable``, an oversize or malformed body ``SourceResponseRejected``.

    The host must be on the policy's allowlist when the source is configured, and every request (each
    redirect hop too, at most ``max_redirects``) goes to an address the policy vets at that moment; a host or
    address it refuses raises ``SourceRefused`` before any connection is made."""

    allowed_trust = frozenset({TrustClass.untrusted_retrieved})
    default_trust = TrustClass.untrusted_retrieved
    config_keys = SourcePlugin.config_keys | {"url", "timeout", "max_bytes"}
    max_timeout = 60.0
    max_redirects = 3
    redirect_statuses = frozenset({301, 302, 303, 307, 308})

    def __init__(
        self,
        name: str,
        url: str,
        *,
        policy: SourcePolicy,
        timeout: float = 5.0,
        max_bytes: int = 1024 * 1024,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        policy.validate_url(url, option="url")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= self.max_timeout
        ):
            raise ValidationFailed(
                f"timeout must be a number of seconds in (0, {self.max_timeout:g}]", field="timeout"
            )
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationFailed("max_bytes must be a positive integer", field="max_bytes")
        self.policy = policy
        self.url = url
        self.timeout = float(timeout)
        self.max_bytes = max_bytes

    @classmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> SourcePlugin:
        options = cls.common_options(config, default_freshness=Freshness(ttl_seconds=3600))
        extra = {key: config[key] for key in ("timeout", "max_bytes") if key in config}
        return cls(name, config.get("url"), policy=policy, clock=clock, **extra, **options)  # type: ignore[arg-type]

    def _request_url(self, query: str, scopes: Sequence[str], limit: int) -> str:
        params = [("q", query), ("limit", str(limit))] + [("scope", scope) for scope in scopes]
        parts = urllib.parse.urlsplit(self.url)
        joined = "&".join(filter(None, [parts.query, urllib.parse.urlencode(params)]))
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, joined, parts.fragment))

    def _timed_out(self) -> SourceUnavailable:
        return SourceUnavailable(self.name, f"timed out after {self.timeout:g}s", kind="timeout")

    def _get(self, url: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        for hop in range(self.max_redirects + 1):
            body, location = self._get_once(url, deadline, redirected=hop > 0)
            if location is None:
                return body
            url = location
        raise SourceResponseRejected(self.name, f"more than {self.max_redirects} redirects")

    def _get_once(self, url: str, deadline: float, *, redirected: bool) -> tuple[bytes, str | None]:
        """One GET: the body, or the absolute URL a redirect points to (the next hop is vetted in turn)."""
        parts = urllib.parse.urlsplit(url)
        try:
            if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
                raise ConfinementRefused("only http(s) URLs are followed")
            port = parts.port or DEFAULT_PORTS[parts.scheme]
            address = self.policy.connect_address(parts.hostname, port)
        except ConfinementRefused as refusal:
            raise SourceRefused(self.name, f"{'redirect refused: ' if redirected else ''}{refusal}") from None
        except (OSError, ValueError):
            raise SourceUnavailable(self.name, f"cannot resolve {parts.hostname}") from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timed_out()
        connection_class = PinnedHTTPSConnection if parts.scheme == "https" else PinnedHTTPConnection
        connection = connection_class(parts.hostname, port, timeout=remaining)
        connection.vetted_address = address
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        try:
            try:
                connection.request("GET", target, headers={"Accept": "application/json"})
                response = connection.getresponse()
            except TimeoutError:
                raise self._timed_out() from None
            except (OSError, http.client.HTTPException):
                # One message for every way a connection fails: it never tells open from closed ports.
                raise SourceUnavailable(self.name, f"cannot connect to {parts.hostname}:{port}") from None
            if response.status in self.redirect_statuses:
                location = response.getheader("Location")
                if not location:
                    raise SourceResponseRejected(self.name, f"HTTP {response.status} without a Location")
                return b"", urllib.parse.urljoin(url, location)
            if response.status >= 400:
                kind = "unreachable" if response.status >= 500 else "error"
                raise SourceUnavailable(self.name, f"HTTP {response.status} {response.reason}", kind=kind)
            return self._read_body(response, deadline), None
        finally:
            connection.close()

    def _read_body(self, response: http.client.HTTPResponse, deadline: float) -> bytes:
        length = response.getheader("Content-Length")
        if length and length.isdigit() and int(length) > self.max_bytes:
            raise SourceResponseRejected(
                self.name, f"response of {length} bytes exceeds the cap of {self.max_bytes}", kind="too_large"
            )
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise self._timed_out()
                chunk = response.read(min(65536, self.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes:
                    raise SourceResponseRejected(
                        self.name, f"response exceeds the cap of {self.max_bytes} bytes", kind="too_large"
                    )
        except TimeoutError:
            raise self._timed_out() from None
        except (OSError, http.client.HTTPException) as exc:
            raise SourceUnavailable(self.name, f"cannot read the response: {exc}") from None
        return b"".join(chunks)

    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        limit = self._validate_limit(limit)
        checked = self._validate_scopes(scopes)
        body = self._get(self._request_url(query or "", checked, limit))
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise SourceResponseRejected(self.name, f"response is not valid JSON: {exc}") from exc
        records = document.get("items") if isinstance(document, dict) else document
        if not isinstance(records, list):
            raise SourceResponseRejected(self.name, 'expected a JSON list or {"items": [...]}')
        trust = self.highest_trust
        items: list[RetrievedItem] = []
        for index, record in enumerate(records):
            if len(items) >= limit:
                break
            if (
                not isinstance(record, dict)
                or not isinstance(record.get("text"), str)
                or not record["text"].strip()
            ):
                continue
            scope = record.get("scope")
            if isinstance(scope, str) and ANY_SCOPE not in checked and scope not in checked:
                continue  # the endpoint answered outside the authorized scopes: drop it
            locator = next(
                (str(record[key]) for key in ("locator", "url", "id") if record.get(key) not in (None, "")),
                f"{self.url}#{index}",
            )
            subject = record.get("subject") if isinstance(record.get("subject"), str) else None
            claimed, signature = record_claim(record)
            items.append(
                RetrievedItem(
                    source=self.name,
                    locator=locator,
                    revision=None,
                    text=record["text"],
                    trust_class=claimed if claimed is not None else trust,
                    observed_at=parse_observed_at(record.get("observed_at"), self.clock),
                    subject=subject,
                    claim=record["claim"] if isinstance(record.get("claim"), str) else "",
                    signature=signature,
                    labels=labels_of(record["text"], trust),
                )
            )
        return items
