"""The client's address behind proxies: `X-Forwarded-For` counts only from trusted ones."""

from __future__ import annotations

import pytest

from core.http.forwarding import client_address, trusted_proxies

PROXIES = trusted_proxies("10.0.0.1, 192.168.0.0/16, ::1")


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        # Not from a trusted proxy: the connection's address, whatever the header says.
        ("203.0.113.7", "10.9.9.9", "203.0.113.7"),
        ("203.0.113.7", "", "203.0.113.7"),
        # From a trusted proxy: the right-most hop that is not a trusted proxy.
        ("10.0.0.1", "198.51.100.2", "198.51.100.2"),
        ("10.0.0.1", "6.6.6.6, 198.51.100.2", "198.51.100.2"),
        ("10.0.0.1", "6.6.6.6, 198.51.100.2, 192.168.4.4", "198.51.100.2"),
        ("::1", "[2001:db8::5]:443", "2001:db8::5"),
        ("10.0.0.1", "198.51.100.2:5555", "198.51.100.2"),
        # Every hop trusted: the left-most.
        ("10.0.0.1", "192.168.1.1, 192.168.2.2", "192.168.1.1"),
        # The proxy sent no header, or a hop that names no address: the proxy's own.
        ("10.0.0.1", "", "10.0.0.1"),
        ("10.0.0.1", "unknown", "10.0.0.1"),
        ("10.0.0.1", "6.6.6.6, 192.168.1.1, garbage\x00", "10.0.0.1"),
        # A connection with no address to speak of.
        (None, "10.9.9.9", None),
        ("garbage", "10.9.9.9", None),
    ],
)
def test_the_client_is_who_the_trusted_proxies_say(
    peer: str | None, forwarded_for: str, client: str | None
) -> None:
    assert client_address(peer, forwarded_for, PROXIES) == client


def test_no_proxy_is_trusted_by_default() -> None:
    assert trusted_proxies("") == ()
    assert client_address("127.0.0.1", "10.9.9.9", trusted_proxies("")) == "127.0.0.1"


@pytest.mark.parametrize("text", ["10.0.0.300", "proxy.internal", "10.0.0.0/40"])
def test_a_list_with_something_that_is_no_address_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not an IP address or network"):
        trusted_proxies(f"10.0.0.1, {text}")
