"""Every dashboard page fits a 1440-px viewport: no horizontal scrolling, even with names as
long as real ones get (a fine-tune's model id, a deployment per region, end-user and session
ids that are hashes). The runs page was once 1,757 to 1,789 px wide. Every page's footer
shows the release the server runs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import quote

import httpx
import orjson
import pytest

from accounts.models import Organization
from accounts.services import key_create
from gateway.models import CatalogModel, Deployment
from mortar import __version__
from tests.conftest import manage, wait_for_run
from tests.dashboard.conftest import sign_in
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

VIEWPORT = {"width": 1440, "height": 900}
LONG_MODEL = "acme-research/Qwen2.5-72B-Instruct-finetune-support-tickets-GPTQ-Int4-2026-11-30-v17"
LONG_DEPLOYMENT = "scripted-eu-west-3-datacenter-b-rack-17-inference-pool-for-support-agents"
LONG_ORGANIZATION = "Acme Research and Development Laboratories, European Support Operations"


@dataclass(frozen=True)
class LongNames:
    organization_id: int
    secret: str
    run_ids: list[str]
    session: str
    end_user: str


@pytest.fixture(scope="module")
def long_names(
    django_db_setup: None, django_db_blocker, sees_other_connections: None, mortar_server
) -> LongNames:
    """Demo data with the longest names the dashboard shows, committed for the server."""
    tag = uuid.uuid4().hex
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.get_or_create(
            name=LONG_DEPLOYMENT, defaults={"scripted_delay_ms": 60}
        )
        CatalogModel.objects.update_or_create(
            id=LONG_MODEL,
            defaults={
                "deployment": deployment,
                "context_window": 8192,
                "price_input": Decimal("1.25"),
                "price_output": Decimal("10"),
            },
        )
        organization, _ = Organization.objects.update_or_create(
            name=f"{LONG_ORGANIZATION} {tag[:6]}",
            defaults={"budget_usd": Decimal("12500.50"), "budget_period": "month"},
        )
        issued = key_create(
            organization=organization, name=f"support-agent-production-eu-west-{tag}"
        )
    session = f"conversation-{tag}{tag}"[:128]
    end_user = f"end-user-sha256-{tag}{tag}{tag}"
    run_ids = []
    for question in ("What does max_tokens limit? " * 30, "Summarize the incident report."):
        answer = httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": LONG_MODEL,
                    "messages": [{"role": "user", "content": question}],
                    "stream_options": {"include_usage": True},
                }
            ),
            headers={
                "Authorization": f"Bearer {issued.secret}",
                "X-Mortar-Session": session,
                "X-Mortar-End-User-Id": end_user,
            },
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        run_ids.append(answer.headers["X-Mortar-Run-Id"])
    with django_db_blocker.unblock():
        for run_id in run_ids:
            wait_for_run(run_id)
    manage("rollupusage", "--hours", "2")  # the audit reads rollups; no beat runs here
    return LongNames(organization.pk, issued.secret, run_ids, session, end_user)


@pytest.fixture(scope="module")
def page(browser, mortar_server: ServerProcess, dashboard_users) -> Iterator[object]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    sign_in(page, mortar_server.base_url, dashboard_users["staff"])
    page.wait_for_url("**/dashboard/")
    yield page
    context.close()


def overflow(page) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return page.evaluate(
        "() => ({scrollWidth: document.documentElement.scrollWidth, innerWidth: innerWidth})"
    )


def assert_fits(page) -> None:  # type: ignore[no-untyped-def]
    widths = overflow(page)
    assert widths["scrollWidth"] <= widths["innerWidth"], (page.url, widths)


PAGES = [
    "/dashboard/?range=24h",
    "/dashboard/?range=30d&organization={org}",
    "/dashboard/runs/",
    "/dashboard/runs/?organization={org}&session={session}",
    # Every filter's select set to a long choice, and a search: the form wraps, never widens.
    "/dashboard/runs/?organization={org}&q=incident&model={model}&deployment={deployment}"
    "&end_user={end_user}&error_code=context_length_exceeded&cost=0.001-up&latency=under-1s",
    "/dashboard/runs/{run}/",
    "/dashboard/runs/{long_run}/",
    "/dashboard/sessions/",
    "/dashboard/audit/",
    "/dashboard/audit/?group=model&group=day",
    "/dashboard/audit/?group=organization&group=key&group=end_user&group=model",
    "/dashboard/budgets/",
    "/dashboard/runs/{long_run}/rerun",
    "/dashboard/runs/{long_run}/compare/{run}/",
    "/dashboard/playground/",
    "/dashboard/spend/",
    "/dashboard/spend/?range=30d&organization={org}",
    "/dashboard/keys/",
    "/dashboard/organizations/",
]


@pytest.mark.parametrize("path", PAGES)
def test_a_page_fits_1440_px_without_horizontal_scrolling(
    page, mortar_server: ServerProcess, long_names: LongNames, path: str
) -> None:
    url = path.format(
        org=long_names.organization_id,
        session=long_names.session,
        run=long_names.run_ids[1],
        long_run=long_names.run_ids[0],
        model=quote(LONG_MODEL),
        deployment=quote(LONG_DEPLOYMENT),
        end_user=long_names.end_user,
    )
    page.goto(f"{mortar_server.base_url}{url}")
    page.wait_for_load_state("load")
    text = page.locator("main").inner_text()
    if "/runs/" in path or "group=model" in path or "spend" in path:
        assert LONG_MODEL in text  # the long name is on the page, not filtered out
    if "sessions" in path or "session=" in path:
        assert long_names.session in text
    assert page.locator("footer.site").inner_text() == f"Mortar {__version__}"
    assert_fits(page)


def test_the_sign_in_page_shows_the_version_too(mortar_server: ServerProcess) -> None:
    response = httpx.get(f"{mortar_server.base_url}/dashboard/login/", timeout=30)

    assert response.status_code == 200
    footer = f'<footer class="site">Mortar <span class="version">{__version__}</span></footer>'
    assert response.text.count(footer) == 1


def test_the_live_page_fits_with_a_long_generation_in_flight(
    page, mortar_server: ServerProcess, long_names: LongNames
) -> None:
    page.goto(f"{mortar_server.base_url}/dashboard/live/")
    page.wait_for_selector("#socket-state[data-state=open]")
    finished = threading.Event()

    def stream() -> None:
        with httpx.stream(
            "POST",
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": LONG_MODEL,
                    "messages": [{"role": "user", "content": "a long answer please " * 40}],
                }
            ),
            headers={
                "Authorization": f"Bearer {long_names.secret}",
                "X-Mortar-Session": long_names.session,
            },
            timeout=60,
        ) as response:
            for _ in response.iter_lines():
                if finished.is_set():
                    break

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    try:
        page.wait_for_selector("#in-flight tbody tr", timeout=15_000)
        page.wait_for_timeout(500)  # events of the stream arrive in the feed
        assert LONG_MODEL in page.locator("main").inner_text()
        assert_fits(page)
    finally:
        finished.set()
        streamer.join(30)


def test_the_overview_s_cards_sit_on_one_row_at_1440_px(
    page, mortar_server: ServerProcess, long_names: LongNames
) -> None:
    page.goto(f"{mortar_server.base_url}/dashboard/?organization={long_names.organization_id}")
    tops = page.locator("#totals .card").evaluate_all(
        "cards => cards.map(c => Math.round(c.getBoundingClientRect().top))"
    )
    assert len(tops) == 9
    assert len(set(tops)) == 1, tops
    # No card's figure wraps onto a second line.
    wrapped = page.locator("#totals .card p").evaluate_all(
        """ps => ps.filter(p => {
            const text = document.createRange();
            text.selectNodeContents(p);
            const lines = new Set([...text.getClientRects()].map(r => Math.round(r.top)));
            return lines.size > 1 || p.scrollWidth > p.clientWidth;
        }).map(p => p.textContent)"""
    )
    assert wrapped == []


def test_the_keys_page_s_budget_period_reads_whole(
    page, mortar_server: ServerProcess, long_names: LongNames
) -> None:
    page.goto(f"{mortar_server.base_url}/dashboard/keys/")
    period = page.locator("#key-create select[name=budget_period]")
    for choice in ("Day (UTC)", "Calendar month (UTC)", "Total (never resets)"):
        period.select_option(label=choice)
        # The select as drawn against the same select free to be as wide as its choice.
        cut = period.evaluate(
            """select => {
                const free = select.cloneNode(true);
                free.value = select.value;
                free.style.maxWidth = "none";
                free.style.width = "auto";
                select.parentNode.appendChild(free);
                const drawn = select.getBoundingClientRect().width;
                const short = free.getBoundingClientRect().width - drawn;
                free.remove();
                return short;
            }"""
        )
        assert cut <= 0.5, (choice, cut)


def test_pages_name_an_icon_the_server_has(browser, mortar_server: ServerProcess) -> None:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    failed: list[str] = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    page.goto(f"{mortar_server.base_url}/dashboard/login/")
    page.wait_for_load_state("load")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    context.close()

    assert icon
    for path in (icon, "/favicon.ico"):
        response = httpx.get(f"{mortar_server.base_url}{path}", timeout=10)
        assert response.status_code == 200
        assert response.headers["content-type"] == "image/svg+xml"
        assert response.text.startswith("<svg ")
    assert failed == []
