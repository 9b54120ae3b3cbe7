"""Which network addresses the web tools may reach, enforced on the address actually connected.

A model that can name URLs can aim a fetch at the host's own services (``http://127.0.0.1``),
the local network, or a cloud metadata endpoint (``http://169.254.169.254``). The guard refuses
every address that is not public unicast, unless a :class:`NetworkPolicy` allows it:

* **URL check** (:meth:`NetworkPolicy.check_url`), before every request and every redirect hop:
  a host that is an IP address in any spelling the resolver accepts (``2130706433``, ``127.1``,
  ``0x7f.0.0.1``, ``[::ffff:127.0.0.1]``...) or a ``localhost`` name is checked as written.
* **Connection check** (:func:`guarded_transport`, in :mod:`._guarded` with httpcore2, loaded
  by a web tool's first client): the transport resolves the host name once itself, drops the
  refused addresses, connects to a checked address (never a second DNS look-up, so DNS
  rebinding cannot swap the address in between) and verifies the socket's peer address.
  TLS still verifies the certificate against the host name.

Addresses refused by default: loopback, unspecified (``0.0.0.0``, ``::``), private (RFC 1918,
ULA ``fc00::/7``), shared (CGNAT ``100.64.0.0/10``), link-local (``169.254.0.0/16`` with the
metadata address, ``fe80::/10``), multicast, broadcast, documentation, benchmarking and
reserved ranges, and the IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible,
6to4, NAT64, Teredo), which are judged by the IPv4 address they carry.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeAlias
from urllib.parse import unquote

import httpx2

__all__ = ["BlockedAddressError", "NetworkPolicy", "parse_ip_host"]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver: TypeAlias = Callable[[str, int], Awaitable[list[str]]]

_net = ipaddress.ip_network
# Special-purpose ranges (IANA registries), listed so the verdict does not depend on the
# Python patch release's idea of ``is_global``; the ``is_*`` properties are checked as well.
_NOT_PUBLIC: tuple[IPNetwork, ...] = tuple(
    _net(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
        "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/96", "::ffff:0:0/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
        "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    )
)  # fmt: skip
_NAT64 = _net("64:ff9b::/96")
_LOOPBACK = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


class BlockedAddressError(httpx2.ConnectError):
    """A request was refused because its host is an address the network policy does not allow.

    It is an :class:`httpx2.ConnectError`, so a client built on :func:`guarded_transport`
    raises it where it would raise any other connection failure.

    Attributes:
        host: the host as written in the URL.
        address: the refused address (the first, when the host resolved to several).
    """

    def __init__(self, host: str, address: IPAddress | None, reason: str) -> None:
        super().__init__(reason)
        self.host = host
        self.address = address


def parse_ip_host(host: str) -> IPAddress | None:
    """The IP address a URL host denotes, in any spelling the C resolver accepts, else ``None``.

    IPv4 follows ``inet_aton``: one to four parts, each decimal, octal (``0`` prefix) or hex
    (``0x``), the last part filling the remaining bytes (``127.1``, ``2130706433``,
    ``0x7f.0.0.1``); one trailing dot is ignored, as browsers do. IPv6 may carry brackets and
    a zone (``fe80::1%25eth0``).

    Example:
        >>> parse_ip_host("0x7f.1"), parse_ip_host("[::ffff:7f00:1]"), parse_ip_host("a.b")
        (IPv4Address('127.0.0.1'), IPv6Address('::ffff:7f00:1'), None)
    """
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        host = unquote(host)
        for candidate in (host, host.partition("%")[0]):  # with its zone, else without
            try:
                return ipaddress.IPv6Address(candidate)
            except ValueError:
                continue
        return None
    return _parse_ipv4_loose(host.removesuffix("."))


# One part of an inet_aton address: hex (0x prefix), octal (0 prefix) or decimal.
_IPV4_PART = re.compile(r"0[xX](?P<hex>[0-9a-fA-F]+)|0(?P<oct>[0-7]+)|(?P<dec>[1-9][0-9]*|0)")
_IPV4_BASES = {"hex": 16, "oct": 8, "dec": 10}


def _parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        match = _IPV4_PART.fullmatch(part)
        if match is None:
            return None
        kind = str(match.lastgroup)
        base = _IPV4_BASES[kind]
        digits = match[kind].lstrip("0") or "0"
        if len(digits) > 12:  # beyond 32 bits in any base: not an address, as for inet_aton
            return None
        numbers.append(int(digits, base))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for i, n in enumerate(head):
        value |= n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _carried_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for or tunnels to, if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def is_public(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address (see the module docstring)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.teredo is not None:
            return False
        carried = _carried_ipv4(ip)
        if carried is not None:
            return is_public(carried)
    if any(ip in network for network in _NOT_PUBLIC):
        return False
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


class NetworkPolicy:
    """Which addresses the web tools (and a :func:`guarded_transport`) may connect to.

    The default policy allows public unicast addresses only. Each option widens it:

    Args:
        allowed_networks: networks reachable even though they are not public, such as
            ``"127.0.0.1/32"`` for a local service or ``"10.0.0.0/8"`` for an intranet (an
            IPv6 address carrying an IPv4 one, like ``::ffff:127.0.0.1``, is allowed when the
            IPv4 address is).
        allowed_hosts: host names whose resolved addresses are all allowed, whatever they are
            (exact names, case-insensitive; ``"localhost"``, ``"wiki.corp"``).
        allow_private: turn the address check off: every address is allowed, including
            loopback, the local network and cloud metadata endpoints. For trusted setups only.

    Example:
        >>> policy = NetworkPolicy(allowed_networks=["127.0.0.1/32"])
        >>> policy.allows(ipaddress.ip_address("127.0.0.1")), policy.allows(
        ...     ipaddress.ip_address("169.254.169.254"))
        (True, False)
    """

    __slots__ = ("allow_private", "allowed_hosts", "allowed_networks")

    def __init__(
        self,
        *,
        allowed_networks: Iterable[str | IPNetwork] = (),
        allowed_hosts: Iterable[str] = (),
        allow_private: bool = False,
    ) -> None:
        if isinstance(allowed_networks, str) or isinstance(allowed_hosts, str):
            raise TypeError("allowed_networks and allowed_hosts take a list, not one string")
        self.allowed_networks: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allowed_networks
        )
        self.allowed_hosts: frozenset[str] = frozenset(_norm_host(h) for h in allowed_hosts)
        self.allow_private = bool(allow_private)

    def __repr__(self) -> str:
        nets = [str(n) for n in self.allowed_networks]
        return (
            f"NetworkPolicy(allowed_networks={nets!r}, "
            f"allowed_hosts={sorted(self.allowed_hosts)!r}, allow_private={self.allow_private})"
        )

    def allows(self, ip: IPAddress) -> bool:
        """Whether connecting to ``ip`` is allowed."""
        if self.allow_private or is_public(ip):
            return True
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and (carried := _carried_ipv4(ip)):
            candidates.append(carried)
        return any(c in net for c in candidates for net in self.allowed_networks)

    def allows_host(self, host: str) -> bool:
        """Whether ``host`` is one of the ``allowed_hosts`` (all its addresses allowed)."""
        return self.allow_private or _norm_host(host) in self.allowed_hosts

    def check_url(self, url: httpx2.URL) -> None:
        """Refuse a URL whose host is, as written, an address this policy does not allow.

        Catches IP literals in every spelling and ``localhost`` names without a DNS look-up;
        other host names are checked on their resolved addresses by :func:`guarded_transport`.

        Raises:
            BlockedAddressError: the host is refused.
        """
        host = url.host
        if self.allows_host(host):
            return
        ip = parse_ip_host(host)
        if ip is not None:
            self.check_address(host, ip)
        elif _is_localhost(host) and not any(self.allows(a) for a in _LOOPBACK):
            raise BlockedAddressError(
                host, _LOOPBACK[0], _refusal(host, "a loopback name (the machine itself)")
            )

    def check_address(self, host: str, ip: IPAddress) -> None:
        """Raise :class:`BlockedAddressError` unless connecting to ``ip`` is allowed."""
        if not self.allows(ip):
            shown = host if parse_ip_host(host) == ip else f"{host} ({ip})"
            raise BlockedAddressError(host, ip, _refusal(shown, _kind(ip)))


def _norm_host(host: str) -> str:
    return host.strip().lower().removesuffix(".")


def _is_localhost(host: str) -> bool:
    host = _norm_host(host)
    return host == "localhost" or host.endswith(".localhost")


def _kind(ip: IPAddress) -> str:
    if isinstance(ip, ipaddress.IPv6Address) and (carried := _carried_ipv4(ip)):
        ip = carried
    if ip.is_loopback:
        return "a loopback address (the machine itself)"
    if ip.is_unspecified:
        return "the unspecified address (the machine itself)"
    if ip.is_link_local:
        return "a link-local address (such as a cloud metadata endpoint)"
    if ip.is_multicast:
        return "a multicast address"
    if ip in ipaddress.ip_network("100.64.0.0/10"):
        return "a shared (carrier-grade NAT) address"
    if ip.is_private:
        return "a private network address"
    return "a reserved or special-purpose address"


def _refusal(host: str, kind: str) -> str:
    return (
        f"Refused to connect to {host}: it is {kind}, which is not allowed. This tool reaches "
        "public internet addresses only; loopback, private, link-local and other special "
        "addresses are blocked unless the host application allows them (NetworkPolicy)."
    )
