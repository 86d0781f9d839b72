"""The Live page in headless Chromium against a real server: one line per request, figures
counted from the events, filters by model, key and status, Pause and Resume, and Stop from the
feed."""

from __future__ import annotations

import threading

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from accounts.models import ApiKey
from telemetry.models import Run
from tests.conftest import Tenant, wait_for_run
from tests.dashboard.conftest import sign_in
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"


def send(server: ServerProcess, tenant: Tenant, **body: object) -> str:
    answer = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "stream": False, **body}
        ),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    return answer.headers["X-Mortar-Run-Id"]


@pytest.fixture
def live_page(
    browser, mortar_server: ServerProcess, dashboard_users, tenant, other_tenant, slow_model
):  # type: ignore[no-untyped-def]
    """The Live page, opened once the tenants' keys and the slow model exist (its filters list
    them), connected to the telemetry socket."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path="/dashboard/live/")
    page.wait_for_url("**/dashboard/live/")
    expect(page.locator("#socket-state")).to_have_text("connected")
    yield page
    context.close()


def rows(page, run_id: str):  # type: ignore[no-untyped-def]
    return page.locator(f'#events tr[data-run-id="{run_id}"]')


def shown_run_ids(page) -> list[str]:  # type: ignore[no-untyped-def]
    return page.locator("#events tbody tr").evaluate_all("rows => rows.map(r => r.dataset.runId)")


def test_one_line_per_request_filtered_by_model_key_and_status(
    live_page, mortar_server: ServerProcess, tenant: Tenant, other_tenant: Tenant, slow_model: str
) -> None:
    page = live_page
    ours = send(mortar_server, tenant)
    theirs = send(mortar_server, other_tenant)
    slow = send(mortar_server, tenant, model=slow_model)
    refused = send(mortar_server, tenant, max_tokens=-1)
    for run_id in (ours, theirs, slow, refused):
        wait_for_run(run_id)
        expect(rows(page, run_id)).to_have_count(1)  # one line, however many events
    expect(rows(page, ours)).to_have_attribute("data-status", "completed")
    expect(rows(page, slow)).to_have_attribute("data-status", "completed")
    expect(rows(page, refused)).to_have_attribute("data-status", "failed")
    expect(rows(page, refused)).to_contain_text("invalid_parameter")
    expect(rows(page, ours)).to_contain_text(tenant.organization.name)
    expect(rows(page, ours)).to_contain_text(tenant.key.prefix)
    expect(rows(page, ours)).to_contain_text(DEFAULT_MODEL)
    expect(rows(page, ours).locator("td.cost")).to_contain_text("$")  # its cost, as money

    # The figures count what the page received.
    assert float(page.locator("#rate-requests").inner_text()) > 0
    assert int(page.locator("#errors-minute").inner_text()) >= 1
    expect(page.locator("#errors-by-code")).to_contain_text("invalid_parameter")
    assert int(page.locator("#seen-total").inner_text()) >= 4

    page.select_option("#event-key", str(tenant.key.pk))
    shown = shown_run_ids(page)
    assert {ours, slow, refused} <= set(shown) and theirs not in shown
    assert set(Run.objects.filter(pk__in=shown).values_list("api_key_id", flat=True)) == {
        tenant.key.pk
    }

    page.select_option("#event-model", slow_model)
    assert shown_run_ids(page) == [slow]

    page.select_option("#event-model", "")
    page.select_option("#event-status", "failed")
    assert refused in shown_run_ids(page)
    assert page.locator("#events tbody tr").evaluate_all(
        "rows => rows.every(r => r.dataset.status === 'failed')"
    )

    page.select_option("#event-status", "")
    page.select_option("#event-key", "")
    assert {ours, theirs, slow, refused} <= set(shown_run_ids(page))


def test_pause_holds_the_feed_still_while_events_are_counted(
    live_page, mortar_server: ServerProcess, tenant: Tenant
) -> None:
    page = live_page
    before = send(mortar_server, tenant)
    expect(rows(page, before)).to_have_attribute("data-status", "completed")
    page.click("#feed-pause")
    expect(page.locator("#feed-pause")).to_have_text("Resume")
    seen = int(page.locator("#seen-total").inner_text())

    during = send(mortar_server, tenant)
    wait_for_run(during)
    expect(page.locator("#seen-total")).to_have_text(str(seen + 1))
    expect(page.locator("#feed-state")).to_contain_text("1 new request since")
    expect(rows(page, during)).to_have_count(0)
    assert shown_run_ids(page)[0] == before

    page.click("#feed-pause")
    expect(page.locator("#feed-pause")).to_have_text("Pause")
    expect(rows(page, during)).to_have_count(1)
    assert shown_run_ids(page)[0] == during


def test_stop_is_one_click_away_in_the_feed(
    live_page, mortar_server: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    page = live_page
    started = threading.Event()
    run_ids: list[str] = []

    def stream() -> None:
        with httpx.stream(
            "POST",
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": slow_model,
                    "messages": [{"role": "user", "content": " ".join(["word"] * 150)}],
                }
            ),
            headers={"Authorization": f"Bearer {tenant.secret}"},
            timeout=60,
        ) as response:
            run_ids.append(response.headers["X-Mortar-Run-Id"])
            started.set()
            for _ in response.iter_lines():
                pass

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    assert started.wait(10)
    run_id = run_ids[0]
    row = rows(page, run_id)
    expect(row).to_have_attribute("data-status", "in_progress")
    expect(page.locator(f'#in-flight-by-model [data-model="{slow_model}"]')).to_be_visible()
    assert int(page.locator("#in-flight-total").inner_text()) >= 1

    row.locator("button[data-stop]").click()
    streamer.join(15)
    assert not streamer.is_alive()
    assert wait_for_run(run_id).status == Run.Status.STOPPED
    expect(row).to_have_attribute("data-status", "stopped")
    expect(page.locator(f'#in-flight tr[data-run-id="{run_id}"]')).to_have_count(0)


def test_a_key_made_after_the_page_opened_becomes_a_filter_choice(
    live_page, mortar_server: ServerProcess, new_tenant
) -> None:
    page = live_page
    key = ApiKey.objects.get(organization__name=new_tenant.name)
    option = page.locator(f'#event-key option[value="{key.pk}"]')
    expect(option).to_have_count(0)
    # Making the tenant took seconds with the page idle: the socket must still be listening
    # (redis-py 8's read timeout once ended an idle consumer; config/settings.py).
    expect(page.locator("#socket-state")).to_have_text("connected", timeout=10_000)
    theirs = send(mortar_server, new_tenant)  # type: ignore[arg-type]
    stored = wait_for_run(theirs)
    assert (stored.status, stored.api_key_id) == (Run.Status.COMPLETED, key.pk)
    expect(option).to_have_count(1)
    page.select_option("#event-key", str(key.pk))
    assert shown_run_ids(page) == [theirs]


def test_a_fast_run_s_durations_read_in_the_same_unit(
    live_page, mortar_server: ServerProcess, tenant: Tenant
) -> None:
    page = live_page
    run_id = send(mortar_server, tenant)
    run = wait_for_run(run_id)
    assert run.finished_at is not None
    assert (run.finished_at - run.accepted_at).total_seconds() < 1  # the scripted model: fast
    expect(rows(page, run_id)).to_have_attribute("data-status", "completed")
    ttft, total = rows(page, run_id).locator("td.num").first.inner_text().split(" / ")

    # "2 ms / 3 ms", never "2 ms / 0.00 s".
    assert ttft.endswith(" ms") and total.endswith(" ms"), (ttft, total)
    numbers = [0.0 if t == "<1 ms" else float(t.removesuffix(" ms")) for t in (ttft, total)]
    assert numbers[0] <= numbers[1]
