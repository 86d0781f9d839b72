"""CORS on the API routes (browsers call the API directly), none on the dashboard or the admin."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Tenant, _server_env, wait_for_run
from tests.dashboard.conftest import browser  # noqa: F401  (Chromium under Playwright)
from tests.support.servers import ServerProcess, start_mortar

pytestmark = pytest.mark.django_db

PAGE_ORIGIN = "http://app.example"
CHAT = "/v1/chat/completions"


def preflight(server: ServerProcess, path: str, origin: str = PAGE_ORIGIN, **headers: str):
    return httpx.options(
        f"{server.base_url}{path}",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-mortar-session,"
            "x-stainless-os,idempotency-key,last-event-id,anthropic-version,x-api-key",
            **headers,
        },
    )


def test_a_preflight_is_answered_with_the_methods_and_headers(mortar_server) -> None:
    response = preflight(mortar_server, CHAT)
    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response.headers
    methods = {m.strip() for m in response.headers["Access-Control-Allow-Methods"].split(",")}
    assert {"GET", "POST", "DELETE"} <= methods
    allowed = {
        h.strip().lower() for h in response.headers["Access-Control-Allow-Headers"].split(",")
    }
    assert {
        "authorization",
        "content-type",
        "x-api-key",
        "last-event-id",
        "idempotency-key",
        "anthropic-version",
        "x-mortar-session",
        "x-mortar-end-user-id",
        "x-mortar-optimize",
        "x-stainless-os",
    } <= allowed
    assert response.content == b""
    assert response.headers["X-Request-Id"].startswith("req_")


def test_an_answer_exposes_the_mortar_headers(mortar_server, tenant: Tenant) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}{CHAT}",
        json={"messages": [{"role": "user", "content": "hi"}], "stream": False},
        headers={"Authorization": f"Bearer {tenant.secret}", "Origin": PAGE_ORIGIN},
    )
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response.headers
    exposed = {
        h.strip().lower() for h in response.headers["Access-Control-Expose-Headers"].split(",")
    }
    assert {
        "x-request-id",
        "x-mortar-run-id",
        "x-mortar-request-id",
        "x-mortar-model",
        "retry-after",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-tokens",
    } <= exposed


def test_errors_and_other_api_routes_carry_cors_too(mortar_server) -> None:
    refused = httpx.post(f"{mortar_server.base_url}{CHAT}", json={}, headers={"Origin": "x"})
    assert refused.status_code == 401  # a page can read why
    assert refused.headers["Access-Control-Allow-Origin"] == "*"
    models = httpx.get(f"{mortar_server.base_url}/v1/models", headers={"Origin": PAGE_ORIGIN})
    assert models.headers["Access-Control-Allow-Origin"] == "*"
    assert preflight(mortar_server, "/v1/messages").status_code == 204


def test_a_request_without_an_origin_gets_no_cors_headers(mortar_server, tenant) -> None:
    response = httpx.get(
        f"{mortar_server.base_url}/v1/models", headers={"Authorization": f"Bearer {tenant.secret}"}
    )
    assert response.status_code == 200
    assert not [name for name in response.headers if name.lower().startswith("access-control")]


@pytest.mark.parametrize("path", ["/dashboard/", "/dashboard/login/", "/admin/login/"])
def test_the_dashboard_and_admin_get_no_cors(mortar_server, path: str) -> None:
    answered = httpx.get(f"{mortar_server.base_url}{path}", headers={"Origin": PAGE_ORIGIN})
    assert "Access-Control-Allow-Origin" not in answered.headers
    refused = preflight(mortar_server, path)
    assert refused.status_code != 204
    assert "Access-Control-Allow-Origin" not in refused.headers


@pytest.fixture(scope="module")
def origins_server(mortar_server, tmp_path_factory) -> Iterator[ServerProcess]:
    env = {**_server_env(), "MORTAR_CORS_ORIGINS": f"{PAGE_ORIGIN}, http://other.example"}
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("cors-origins"))
    yield server
    server.stop()


def test_configured_origins_are_the_only_ones_allowed(origins_server: ServerProcess) -> None:
    allowed = preflight(origins_server, CHAT)
    assert allowed.status_code == 204
    assert allowed.headers["Access-Control-Allow-Origin"] == PAGE_ORIGIN
    assert allowed.headers["Vary"] == "Origin"
    stranger = preflight(origins_server, CHAT, origin="http://evil.example")
    assert "Access-Control-Allow-Origin" not in stranger.headers
    simple = httpx.get(f"{origins_server.base_url}/v1/models", headers={"Origin": "http://x.y"})
    assert "Access-Control-Allow-Origin" not in simple.headers


PAGE = """<!doctype html><title>a page of another origin</title>
<script>
async function streamCompletion(base, key) {
  const response = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json",
              "X-Mortar-Session": "browser-session"},
    body: JSON.stringify({messages: [{role: "user", content: "What does max_tokens limit?"}],
                          stream: true, stream_options: {include_usage: true}}),
  });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "", reads = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    reads += 1;
    text += decoder.decode(value, {stream: true});
  }
  return {status: response.status, runId: response.headers.get("X-Mortar-Run-Id"),
          requestId: response.headers.get("X-Request-Id"), text, reads};
}
</script>"""


@pytest.fixture(scope="module")
def page_origin(tmp_path_factory) -> Iterator[str]:
    """A tiny static server on another loopback port: the page's origin."""
    root = Path(tmp_path_factory.mktemp("page"))
    (root / "index.html").write_text(PAGE)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_page_of_another_origin_streams_and_reads_the_run_id(
    browser,  # noqa: F811  (the fixture imported above)
    page_origin: str,
    mortar_server: ServerProcess,
    tenant: Tenant,
) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    try:
        page.goto(f"{page_origin}/index.html")
        result = page.evaluate(
            "([base, key]) => streamCompletion(base, key)", [mortar_server.base_url, tenant.secret]
        )
    finally:
        page.close()
    assert page_origin != mortar_server.base_url
    assert result["status"] == 200
    assert result["runId"].startswith("chatcmpl-")
    assert result["requestId"]
    assert result["text"].rstrip().endswith("data: [DONE]")
    assert f'"id":"{result["runId"]}"' in result["text"]
    run = wait_for_run(result["runId"])
    assert run.session == "browser-session"
    assert run.status == "completed"
