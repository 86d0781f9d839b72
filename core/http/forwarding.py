"""Who the client is when proxies forward its requests: `X-Forwarded-For`, trusted only from
the proxies the operator named.

Any client can send `X-Forwarded-For`; only a proxy Mortar trusts can vouch for it. The client
is the connection's address unless that address is a trusted proxy; then it is the right-most
address in `X-Forwarded-For` that is not a trusted proxy itself (each proxy appends the address
it was reached from, so everything left of the first untrusted hop is the client's to invent).
If every hop is a trusted proxy, the left-most one is the client. uvicorn's `ProxyHeadersMiddleware`
decides the same way, given the same list (`config/serve.py` passes it as
`--forwarded-allow-ips`): applied again to what it decided, this changes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def trusted_proxies(text: str) -> tuple[Network, ...]:
    """Parse a comma-separated list of addresses and networks (`10.0.0.5, 10.1.0.0/16`);
    raise ValueError naming the first that is neither."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or network") from None
    return tuple(networks)


def _address(hop: str) -> Address | None:
    """The address of one `X-Forwarded-For` hop (`1.2.3.4`, `1.2.3.4:80`, `[::1]:80`, `::1`)."""
    hop = hop.strip()
    if hop.startswith("["):
        hop = hop[1 : hop.find("]")] if "]" in hop else hop
    elif hop.count(":") == 1:
        hop = hop.split(":", 1)[0]
    try:
        return ipaddress.ip_address(hop)
    except ValueError:
        return None


def _trusted(address: Address | None, proxies: Sequence[Network]) -> bool:
    return address is not None and any(address in network for network in proxies)


def client_address(peer: str | None, forwarded_for: str, proxies: Sequence[Network]) -> str | None:
    """The client's address: `peer` (the connection's), or what the trusted proxies say.

    A hop that is no address (`unknown`, a name, garbage) stands for a client the last trusted
    proxy could not name: that proxy's address is the client's then.
    """
    current = _address(peer or "")
    if current is None:
        return None  # not an address (a server that decided on garbage): unknown
    if not _trusted(current, proxies) or not forwarded_for.strip():
        return str(current)
    for hop in reversed(forwarded_for.split(",")):
        address = _address(hop)
        if address is None:
            return str(current)
        current = address
        if not _trusted(address, proxies):
            return str(address)
    return str(current)  # every hop a trusted proxy: the left-most
