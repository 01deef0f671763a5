"""HTTP connections pinned to an address a policy vetted: the sources' ``http_json`` and the webhooks'
deliveries connect through them, so a name cannot resolve to another address between the check and the
connection."""

from __future__ import annotations

import http.client
import socket


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address the policy vetted (``vetted_address``) instead of resolving the host again,
    so the name cannot resolve to another address between the check and the connection (DNS rebinding).
    The Host header and, for HTTPS, the TLS server name stay the URL's host."""

    vetted_address = ""

    def connect(self) -> None:
        self.sock = socket.create_connection((self.vetted_address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class PinnedHTTPSConnection(http.client.HTTPSConnection, PinnedHTTPConnection):
    """HTTPS over the vetted address: ``HTTPSConnection.connect`` wraps the socket the pinned connect made."""
