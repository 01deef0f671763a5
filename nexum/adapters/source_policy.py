"""Where context sources may read: folders inside operator roots, HTTP hosts on an operator allowlist.

A source's configuration comes from an API caller, so its folder path and its URL are untrusted input. The
operator's ``SourcePolicy`` confines them; built-in sources take one and check with it twice: when the source
is configured (``confine_path``, ``validate_url``: a refusal is ``SourceNotAllowed``, 422, naming the option)
and at every read (``open_file``, ``connect_address``: a refusal is ``ConfinementRefused``, which the source
reports as a failed retrieval). A check always comes before any access, so no refusal says whether a path
exists or a port is open.

Who can write. ``writer_of`` says who can change a resolved path: the agent inside ``agent_writable`` (the
workspace root, which every project's workspace lies in), else the operator. A source over a path the agent
can write yields items at most ``agent_reported`` (SPEC R4a), checked when it is configured and at every read.

Files. A configured path is taken relative to the project's workspace unless absolute, must not climb with
``..``, and is resolved with realpath (symlinks followed). It must then lie inside one of ``roots`` and must
neither lie inside nor contain a ``forbidden`` place (the data directory, the artifact store, the database
file, the workspace root, the published root). A forbidden place that holds one of the project's own folders
(its workspace, its published copies) does not forbid that folder: a project reads its own and no other
project's. ``open_file`` checks the file it actually opened (the descriptor's path, so a symlink planted
later or a swap between check and open is caught) and opens regular files only (a FIFO cannot hang a read).

HTTP. A URL's host must be on ``http_allow`` (``host`` allows every port, ``host:port`` one port). IP
literals are compared in canonical form, whatever form the caller wrote (``127.1``, ``2130706433``,
``0x7f000001``, ``[::1]``, ``::ffff:127.0.0.1``: the forms the C resolver accepts). At fetch time
``connect_address`` resolves the host and accepts it only when every address is public or is itself listed:
a listed name that resolves to a loopback, private, link-local or unspecified address (DNS rebinding) is
refused. The caller then connects to that vetted address, never through a second lookup.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import stat
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from nexum.core.errors import PolicyRefused, ValidationFailed
from nexum.core.roles import AGENT, OPERATOR

ROOTS_SETTING = "NEXUM_SOURCE_ROOTS"
HTTP_ALLOW_SETTING = "NEXUM_SOURCE_HTTP_ALLOW"
DEFAULT_PORTS = {"http": 80, "https": 443}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


class SourceNotAllowed(PolicyRefused):
    """A source configuration reaches outside what the operator allows (HTTP 422)."""

    code = "source_not_allowed"


class ConfinementRefused(Exception):
    """A read the policy refuses at retrieve time (the source reports it as a failed retrieval)."""


def system_addresses(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, as the connection would see them."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


# --- hosts ------------------------------------------------------------------------------------------------

# An http(s) URL as RFC 3986 writes one, in a form the parser reads the same way: ASCII only, a host that is
# a name (``_HOST_NAME``, any case, a final dot allowed), an IPv4 or a bracketed IPv6 address, a port of at
# most 65535. The API's schema carries the same pattern (ECMAScript reads it as Python does).
_HEX16 = "[0-9A-Fa-f]{1,4}"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LS32 = f"(?:{_HEX16}:{_HEX16}|{_OCTET}(?:\\.{_OCTET}){{3}})"


def _hextets(most: int) -> str:
    """Up to ``most`` hextets separated by colons (RFC 3986's ``[ *(most-1)( h16 ":" ) h16 ]``)."""
    return f"(?:(?:{_HEX16}:){{0,{most - 1}}}{_HEX16})?"


_IPV6 = "|".join(
    [
        f"(?:{_HEX16}:){{6}}{_LS32}",
        f"::(?:{_HEX16}:){{5}}{_LS32}",
        *(f"{_hextets(most)}::(?:{_HEX16}:){{{5 - most}}}{_LS32}" for most in (1, 2, 3, 4)),
        f"{_hextets(5)}::{_LS32}",
        f"{_hextets(6)}::{_HEX16}",
        f"{_hextets(7)}::",
    ]
)
_URL_TEXT = "-A-Za-z0-9._~!$&'()*+,;=%"  # RFC 3986: unreserved, sub-delims, percent-encoding
_NAME_LABEL = "[A-Za-z0-9_](?:[-A-Za-z0-9_]*[A-Za-z0-9_])?"
_PORT = "0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
HTTP_URL_RULE = "an http(s) URL (RFC 3986, ASCII; a host name, an IPv4 or a [bracketed IPv6] address)"
HTTP_URL = (
    "^[Hh][Tt][Tt][Pp][Ss]?://"
    f"(?:[{_URL_TEXT}:]*@)?"
    f"(?:{_NAME_LABEL}(?:\\.{_NAME_LABEL})*\\.?|\\[(?:{_IPV6})\\])"
    f"(?::(?:{_PORT})?)?"
    f"(?:[/?#][{_URL_TEXT}:@/?#\\[\\]]*)?$"
)

_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*")
_LEGACY_IPV4 = re.compile(r"[0-9a-fx.]+")
_HTTP_URL = re.compile(HTTP_URL)


def ip_of(text: str) -> IPAddress | None:
    """The IP address ``text`` denotes, in any form the C resolver accepts (``127.1``, ``2130706433``,
    ``0x7f.0.0.1``, IPv4-mapped IPv6), or ``None`` for a host name."""
    try:
        address: IPAddress = ipaddress.ip_address(text)
    except ValueError:
        if not _LEGACY_IPV4.fullmatch(text):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def canonical_host(host: str) -> str:
    """A host in one comparable form: IP literals canonical, names lowercase without a trailing dot.
    ``ValueError`` for anything that is neither an IP address nor a host name."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.removesuffix(".")
    address = ip_of(text)
    if address is not None:
        return str(address)
    if not _HOST_NAME.fullmatch(text):
        raise ValueError(f"{host!r} is not a host name or an IP address")
    return text


def is_public(address: IPAddress) -> bool:
    """Globally routable unicast: not loopback, private, link-local, unspecified, reserved or multicast."""
    return (
        address.is_global
        and not address.is_multicast
        and not address.is_reserved
        and not (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
    )


@dataclass(frozen=True)
class HostEntry:
    """One allowlist entry: a host, and a port or ``None`` for every port."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, entry: str) -> HostEntry:
        """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address; ``ValueError`` if none."""
        text = entry.strip()
        port_text: str | None = None
        if text.startswith("["):
            close = text.find("]")
            rest = text[close + 1 :] if close > 0 else ":"
            if rest and not (close > 0 and rest.startswith(":")):
                raise ValueError(f"malformed host entry {entry!r}")
            host, port_text = text[: close + 1], (rest[1:] if rest else None)
        elif text.count(":") == 1:
            host, port_text = text.split(":")
        else:
            host = text
        port = None
        if port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"malformed port in host entry {entry!r}")
            port = int(port_text)
        return cls(canonical_host(host), port)

    def matches(self, host: str, port: int) -> bool:
        return self.host == host and self.port in (None, port)


# --- the policy -------------------------------------------------------------------------------------------


def _real(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, place: Path) -> bool:
    return path == place or path.is_relative_to(place)


def _descriptor_path(descriptor: int) -> Path | None:
    """The path of the file a descriptor actually refers to (Linux ``/proc``), or ``None`` if unknown."""
    try:
        target = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return None
    return Path(target) if target.startswith("/") else None


@dataclass(frozen=True)
class SourcePolicy:
    """The operator's confinement of sources. Paths are resolved (realpath) once, here.

    ``roots``: folders file sources may read inside. ``forbidden``: (what, path) pairs a source may neither
    read inside nor contain. ``project_workspace``: the project's own workspace folder (relative paths are
    taken from it; a forbidden place holding it does not forbid it). ``project_published``: the project's
    folder of published read-only copies (not forbidden either). ``agent_writable``: where the executing
    agent writes (``writer_of``). ``http_allow``: host or host:port entries. ``resolve_host``: how a host
    name becomes addresses at fetch time (a test may fake DNS).
    """

    roots: tuple[Path, ...] = ()
    forbidden: tuple[tuple[str, Path], ...] = ()
    project_workspace: Path | None = None
    project_published: Path | None = None
    http_allow: tuple[HostEntry, ...] = ()
    resolve_host: Resolver = field(default=system_addresses, compare=False)
    agent_writable: tuple[Path, ...] = ()

    @classmethod
    def build(
        cls,
        *,
        roots: Iterable[str | os.PathLike[str]] = (),
        forbidden: Iterable[tuple[str, str | os.PathLike[str]]] = (),
        project_workspace: str | os.PathLike[str] | None = None,
        project_published: str | os.PathLike[str] | None = None,
        http_allow: Iterable[str] = (),
        resolve_host: Resolver = system_addresses,
        agent_writable: Iterable[str | os.PathLike[str]] = (),
    ) -> SourcePolicy:
        """A policy from configured values: paths resolved, host entries parsed (``ValueError`` if one is
        malformed)."""
        return cls(
            roots=tuple(_real(root) for root in roots),
            forbidden=tuple((what, _real(place)) for what, place in forbidden),
            project_workspace=None if project_workspace is None else _real(project_workspace),
            project_published=None if project_published is None else _real(project_published),
            http_allow=tuple(HostEntry.parse(entry) for entry in http_allow),
            resolve_host=resolve_host,
            agent_writable=tuple(_real(place) for place in agent_writable),
        )

    def writer_of(self, real: Path) -> str:
        """Who can change what a resolved path holds (R4a): ``agent`` inside a place the executing agent
        writes (``agent_writable``: the workspace root, every project's workspace under it), else
        ``operator``. Given the realpath, so a folder that is a symlink into the workspace is the agent's."""
        return AGENT if any(_within(real, place) for place in self.agent_writable) else OPERATOR

    # files

    def path_refusal(self, real: Path, *, as_folder: bool = False) -> str | None:
        """Why a resolved path may not be read (``None``: it may). ``as_folder``: the path is a folder a
        source walks, so it must not contain a forbidden place either."""
        if not any(_within(real, root) for root in self.roots):
            return f"is outside the source roots ({ROOTS_SETTING})"
        own = [folder for folder in (self.project_workspace, self.project_published) if folder is not None]
        places = [
            (what, place)
            for what, place in sorted(self.forbidden, key=lambda entry: -len(entry[1].parts))  # nearest first
            if not any(_within(real, folder) and _within(folder, place) for folder in own)
        ]  # a place holding the project's own folders (the data directory, say) does not forbid them
        for what, place in places:
            if _within(real, place):
                return f"is inside {what}"
        for what, place in reversed(places) if as_folder else ():  # the outermost it contains
            if _within(place, real):
                return f"contains {what}"
        return None

    def confine_path(self, path: object, *, option: str = "path", as_folder: bool = True) -> Path:
        """The resolved path a source may read for the configured ``path``, or ``SourceNotAllowed`` naming
        ``option``. Relative paths are taken from the project's workspace."""
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise ValidationFailed(f"{option} must be a non-empty path", field=option)
        if ".." in PurePosixPath(path).parts:
            raise SourceNotAllowed(
                f"{option} {path!r} climbs out with '..'; name a folder inside the source roots",
                field=option,
                details={"setting": ROOTS_SETTING},
            )
        if not os.path.isabs(path):
            if self.project_workspace is None:
                raise SourceNotAllowed(
                    f"{option} {path!r} is relative and there is no project workspace to take it from",
                    field=option,
                    details={"setting": ROOTS_SETTING},
                )
            path = str(self.project_workspace / path)
        real = _real(path)
        reason = self.path_refusal(real, as_folder=as_folder)
        if reason is not None:
            raise SourceNotAllowed(
                f"{option} {path!r} {reason}", field=option, details={"setting": ROOTS_SETTING}
            )
        return real

    def _file_refusal(self, real: Path, inside: Path | None) -> str | None:
        if inside is not None and not _within(real, inside):
            return "leaves its source's folder"
        return self.path_refusal(real)

    def open_file(self, path: Path, *, inside: Path | None = None) -> BinaryIO:
        """Open ``path`` for reading if the regular file actually opened is one the policy allows (and lies
        in the folder ``inside``, when given); else ``ConfinementRefused``. ``OSError`` when it cannot be
        opened."""
        reason = self._file_refusal(_real(path), inside)
        if reason is not None:
            raise ConfinementRefused(f"{path.name} {reason}")
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise ConfinementRefused(f"{path.name} is not a regular file")
            reason = self._file_refusal(_descriptor_path(descriptor) or _real(path), inside)
            if reason is not None:
                raise ConfinementRefused(f"{path.name} {reason}")
            return os.fdopen(descriptor, "rb")
        except BaseException:
            os.close(descriptor)
            raise

    # HTTP

    def _listed(self, host: str, port: int) -> bool:
        return any(entry.matches(host, port) for entry in self.http_allow)

    def validate_url(self, url: object, *, option: str = "url") -> urllib.parse.SplitResult:
        """The parsed URL if its host and port are on the allowlist, else ``SourceNotAllowed`` naming
        ``option``; ``ValidationFailed`` for what is not an http(s) URL (``HTTP_URL``)."""
        if not isinstance(url, str) or not _HTTP_URL.fullmatch(url):
            raise ValidationFailed(f"{option} must be {HTTP_URL_RULE}", field=option)
        parts = urllib.parse.urlsplit(url)
        port = parts.port or DEFAULT_PORTS[parts.scheme]
        host = canonical_host(parts.hostname or "")
        if not self._listed(host, port):
            raise SourceNotAllowed(
                f"{option}: host {parts.hostname}:{port} is not on the operator's allowlist"
                f" ({HTTP_ALLOW_SETTING})",
                field=option,
                details={"setting": HTTP_ALLOW_SETTING},
            )
        return parts

    def connect_address(self, host: str, port: int) -> str:
        """The vetted address to connect to for ``host:port`` (resolved now), or ``ConfinementRefused``:
        the host is not listed, or it resolves to a non-public address that is not itself listed.
        ``OSError`` when the name does not resolve."""
        try:
            canonical = canonical_host(host)
        except ValueError as error:
            raise ConfinementRefused(str(error)) from None
        if not self._listed(canonical, port):
            raise ConfinementRefused(f"host {host}:{port} is not on the allowlist ({HTTP_ALLOW_SETTING})")
        literal = ip_of(canonical)
        found = [literal] if literal is not None else [ip_of(a) for a in self.resolve_host(canonical, port)]
        if not found:
            raise OSError(f"{host} resolves to no address")
        for address in found:
            if address is None or (not is_public(address) and not self._listed(str(address), port)):
                raise ConfinementRefused(
                    f"host {host} resolves to a non-public address that is not itself on the allowlist"
                    f" ({HTTP_ALLOW_SETTING})"
                )
        return str(found[0])
