"""`python -m config.serve` decides whose forwarding headers uvicorn believes, from
`MORTAR_TRUSTED_PROXIES` alone, so that uvicorn and the sign-in lockout agree."""

from __future__ import annotations

import pytest
from uvicorn.main import main as uvicorn_main

from config.serve import uvicorn_arguments


def parsed(monkeypatch: pytest.MonkeyPatch, trusted: str | None) -> dict[str, object]:
    if trusted is None:
        monkeypatch.delenv("MORTAR_TRUSTED_PROXIES", raising=False)
    else:
        monkeypatch.setenv("MORTAR_TRUSTED_PROXIES", trusted)
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")  # uvicorn's own variable: never consulted
    arguments = uvicorn_arguments(["--host", "127.0.0.1", "--port", "8000"])
    return uvicorn_main.make_context("config.serve", arguments).params


@pytest.mark.parametrize("trusted", [None, "", " , "])
def test_no_proxy_is_trusted_by_default(monkeypatch: pytest.MonkeyPatch, trusted: str) -> None:
    params = parsed(monkeypatch, trusted)
    assert params["proxy_headers"] is False


def test_the_trusted_proxies_are_uvicorn_s_forwarded_allow_ips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    params = parsed(monkeypatch, "10.0.0.5, 10.1.0.0/16,::1")
    assert params["proxy_headers"] is True
    assert params["forwarded_allow_ips"] == "10.0.0.5/32,10.1.0.0/16,::1/128"


@pytest.mark.parametrize(
    "option", ["--forwarded-allow-ips=*", "--proxy-headers", "--no-proxy-headers"]
)
def test_uvicorn_s_own_proxy_options_are_refused(option: str) -> None:
    with pytest.raises(ValueError, match="set MORTAR_TRUSTED_PROXIES rather than"):
        uvicorn_arguments(["--port", "8000", option])


def test_a_trusted_proxy_that_is_no_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORTAR_TRUSTED_PROXIES", "10.0.0.5, proxy.internal")
    with pytest.raises(ValueError, match=r"MORTAR_TRUSTED_PROXIES: 'proxy\.internal' is not"):
        uvicorn_arguments(["--port", "8000"])
