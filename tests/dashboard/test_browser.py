"""The dashboard driven like an operator would, in headless Chromium against a real server:
watch a run stream in the live view, stop it, open and replay it, filter the runs list, and
export the cost audit and check it against the database."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
import pytest
from django.db.models import Count, Sum
from django.db.models.functions import TruncDate
from playwright.sync_api import expect

from accounts.models import ApiKey, Organization
from dashboard.selectors.replies import reply_of
from telemetry.models import Run, RunChunk
from tests.conftest import Tenant, manage, wait_for_run
from tests.dashboard.conftest import sign_in
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


class StreamingClient(threading.Thread):
    """A client reading a streamed completion line by line, on its own thread."""

    def __init__(self, server: ServerProcess, secret: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url = f"{server.base_url}/v1/chat/completions"
        self.secret = secret
        self.body = body
        self.run_id = ""
        self.started = threading.Event()
        self.lines: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream(
                "POST",
                self.url,
                content=orjson.dumps(self.body),
                headers={"Authorization": f"Bearer {self.secret}"},
                timeout=30,
            ) as response:
                self.run_id = response.headers["X-Mortar-Run-Id"]
                self.started.set()
                for line in response.iter_lines():
                    if line:
                        self.lines.append(line)
        except BaseException as error:  # reported by the test
            self.error = error
            self.started.set()

    @property
    def payloads(self) -> list[dict]:
        return [json.loads(line[6:]) for line in self.lines if line not in ("data: [DONE]",)]


def long_question(words: int = 150) -> str:
    return " ".join(f"word{i}" for i in range(words))


def test_operator_watches_stops_opens_and_replays_a_run(
    browser, mortar_server: ServerProcess, tenant: Tenant, slow_model: str, dashboard_users
) -> None:
    context = browser.new_context(accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path="/dashboard/live/")
    page.wait_for_url("**/dashboard/live/")
    expect(page.locator("#socket-state")).to_have_text("connected")

    # ~50 pieces, 200 ms apart: about ten seconds of streaming unless stopped.
    client = StreamingClient(
        mortar_server,
        tenant.secret,
        {
            "model": slow_model,
            "messages": [{"role": "user", "content": long_question()}],
            "stream_options": {"include_usage": True},
        },
    )
    client.start()
    assert client.started.wait(10) and client.error is None, client.error
    run_id = client.run_id

    row = page.locator(f'#in-flight tr[data-run-id="{run_id}"]')
    expect(row).to_be_visible(timeout=5000)
    expect(row).to_contain_text(tenant.organization.name)
    expect(row).to_contain_text(slow_model)
    expect(
        page.locator(f'#events tr[data-run-id="{run_id}"][data-status="in_progress"]')
    ).to_be_visible()
    # Tokens so far grow as the writer stores chunks.
    page.wait_for_function(
        """id => {
            const cell = document.querySelector(`#in-flight tr[data-run-id="${id}"] td.tokens`);
            return cell && Number(cell.textContent) > 3;
        }""",
        arg=run_id,
        timeout=5000,
    )
    assert client.is_alive(), "the stream ended before the test could stop it"

    row.locator("button[data-stop]").click()
    client.join(10)
    assert not client.is_alive() and client.error is None
    # A stopped stream sends no finish chunk; the usage chunk and [DONE] still follow.
    assert client.lines[-1] == "data: [DONE]"
    assert [p["choices"][0].get("finish_reason") for p in client.payloads if p["choices"]] == [
        None
    ] * len([p for p in client.payloads if p["choices"]])
    assert client.payloads[-1]["choices"] == [] and "usage" in client.payloads[-1]
    stored = wait_for_run(run_id)
    assert stored.status == Run.Status.STOPPED
    expect(row).to_have_count(0, timeout=5000)
    expect(
        page.locator(f'#events tr[data-run-id="{run_id}"][data-status="stopped"]')
    ).to_be_visible()

    # Open its page from the event feed.
    page.locator("#events a", has_text=run_id).first.click()
    page.wait_for_url(f"**/dashboard/runs/{run_id}/")
    expect(page.locator("#run-status")).to_have_text("stopped")
    chunks = [
        bytes(data)
        for data in RunChunk.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list("data", flat=True)
    ]
    reply = reply_of(chunks).content
    assert reply.startswith("You said: word0") and len(reply) < len(long_question())
    expect(page.locator("#reply-text")).to_have_text(reply)
    expect(page.locator("#timeline tbody tr")).to_have_count(len(chunks))

    # Replay as fast as possible: the same text, the same events, [DONE] at the end.
    page.click("#replay-fast")
    expect(page.locator("#replay")).to_have_attribute("data-state", "done")
    assert page.inner_text("#replay-text") == reply
    expect(page.locator("#replay-state")).to_contain_text(f"{len(chunks)} events")
    expect(page.locator("#replay-state")).to_contain_text("[DONE]")

    # At the recorded pace it takes about as long as the run streamed (a lower bound: pacing is
    # the behaviour here, and a busy machine only makes it take longer).
    offsets = list(
        RunChunk.objects.filter(run_id=run_id).order_by("seq").values_list("offset_us", flat=True)
    )
    recorded = (offsets[-1] - offsets[0]) / 1_000_000
    began = time.monotonic()
    page.click("#replay-paced")
    expect(page.locator("#replay")).to_have_attribute("data-state", "playing")
    expect(page.locator("#replay")).to_have_attribute("data-state", "done", timeout=20_000)
    assert time.monotonic() - began >= recorded * 0.8
    assert page.inner_text("#replay-text") == reply

    # Download as JSON: the run and every chunk.
    with page.expect_download() as download:
        page.click("text=Download JSON")
    exported = json.loads(Path(download.value.path()).read_text())
    assert exported["id"] == run_id
    assert exported["status"] == "stopped"
    assert [c["data"].encode() for c in exported["chunks"]] == chunks

    # Copy as curl: the request as received, the key left to the environment.
    page.click("#copy-curl")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("curl -N http://127.0.0.1:")
    assert "$MORTAR_API_KEY" in copied and "word149" in copied
    context.close()


def test_operator_filters_the_runs_list(
    browser, mortar_server: ServerProcess, tenant: Tenant, dashboard_users
) -> None:
    tag = uuid.uuid4().hex[:8]
    sent = []
    for session, end_user, max_tokens in (
        (f"list-a-{tag}", "ann", 100),
        (f"list-a-{tag}", "ben", 100),
        (f"list-a-{tag}", "ann", 2),  # cut: finish_reason "length"
        (f"list-b-{tag}", "ann", 100),
    ):
        response = httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "messages": [{"role": "user", "content": "hello there, how are you"}],
                    "max_tokens": max_tokens,
                    "stream": False,
                }
            ),
            headers={
                "Authorization": f"Bearer {tenant.secret}",
                "X-Mortar-Session": session,
                "X-Mortar-End-User-Id": f"{end_user}-{tag}",
            },
        )
        sent.append(response.headers["X-Mortar-Run-Id"])
    for run_id in sent:
        wait_for_run(run_id)

    page = browser.new_page()
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path="/dashboard/runs/")
    page.wait_for_url("**/dashboard/runs/")

    def listed() -> list[str]:
        return page.locator("#runs tbody tr[data-run-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.runId)"
        )

    page.fill("input[name=session]", f"list-a-{tag}")
    page.click("#run-filters button[type=submit]")
    page.wait_for_url(f"**session=list-a-{tag}**")
    assert listed() == sent[2::-1]  # newest first

    page.select_option("select[name=finish_reason]", "length")
    page.click("#run-filters button[type=submit]")
    page.wait_for_url("**finish_reason=length**")
    assert listed() == [sent[2]]
    expect(page.locator("#runs tbody")).to_contain_text("length")

    page.goto(f"{mortar_server.base_url}/dashboard/runs/")
    page.select_option("select[name=end_user]", f"ann-{tag}")
    page.select_option("select[name=organization]", str(tenant.organization.pk))
    page.click("#run-filters button[type=submit]")
    page.wait_for_url(f"**end_user=ann-{tag}**")
    assert listed() == [sent[3], sent[2], sent[0]]
    page.close()


AUDIT_CONFIG = """
models:
  - id: audit-priced
    deployment: mock-one
    prices: {{input: 2.0, cached_input: 0.5, output: 8.0}}
organizations:
  - name: {organization}
"""


def test_audit_csv_matches_the_database(
    browser, mortar_server: ServerProcess, upstream_models, dashboard_users, tmp_path: Path
) -> None:
    name = f"audit-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "audit.yaml"
    config.write_text(AUDIT_CONFIG.format(organization=name))
    manage("applyconfig", str(config))
    secret = manage("createkey", name, "--name", "audit").strip()
    organization = Organization.objects.get(name=name)
    key = ApiKey.objects.get(organization=organization)

    sent = []
    for model, end_user, content in (
        ("audit-priced", "ann", "Hi [mock chunks=4 cached=7]"),
        ("audit-priced", "ann", "Again [mock chunks=2 cached=7]"),
        ("audit-priced", "ben", "Hello [mock chunks=3]"),
        ("Qwen/Qwen2.5-7B-Instruct", "ben", "What does max_tokens limit?"),
    ):
        response = httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": model,
                    "messages": [{"role": "user", "content": content}],
                    "stream": False,
                }
            ),
            headers={"Authorization": f"Bearer {secret}", "X-Mortar-End-User-Id": end_user},
            timeout=15,
        )
        assert response.status_code == 200, response.text
        sent.append(response.headers["X-Mortar-Run-Id"])
    for run_id in sent:
        wait_for_run(run_id)
    now = datetime.now(UTC)
    manage(
        "rollupusage",
        "--since",
        (now - timedelta(hours=2)).isoformat(),
        "--until",
        (now + timedelta(minutes=1)).isoformat(),
    )

    page = browser.new_page(accept_downloads=True)
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path="/dashboard/audit/")
    page.wait_for_url("**/dashboard/audit/")
    page.select_option("select[name=organization]", str(organization.pk))
    expect(page.locator("#audit-form input[name=group]:checked")).to_have_count(1)  # organization
    for dimension in ("key", "end_user", "model", "day"):
        page.check(f"#audit-form input[name=group][value={dimension}]")
    page.click("#audit-form button[type=submit]")
    page.wait_for_url(f"**organization={organization.pk}**")
    expect(page.locator("#audit tbody tr")).to_have_count(3)
    with page.expect_download() as download:
        page.click("#export-csv")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))

    expected = {
        (row["end_user"], row["model"], row["day"].isoformat()): row
        for row in Run.objects.filter(organization=organization)
        .annotate(day=TruncDate("accepted_at"))
        .values("end_user", "model", "day")
        .annotate(
            requests=Count("pk"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            cached=Sum("cached_tokens"),
            cost=Sum("cost"),
        )
    }
    assert len(rows) == len(expected) == 3
    for row in rows:
        want = expected[(row["end_user"], row["model"], row["day"])]
        assert row["organization"] == name
        assert row["key"] == f"{key.prefix}… audit"
        assert int(row["requests"]) == want["requests"]
        assert int(row["prompt_tokens"]) == want["prompt"]
        assert int(row["completion_tokens"]) == want["completion"]
        assert int(row["cached_tokens"]) == (want["cached"] or 0)
        assert Decimal(row["cost"]) == want["cost"]
        ratio = (want["cached"] or 0) / want["prompt"]
        assert float(row["cache_hit_ratio"]) == pytest.approx(ratio, abs=5e-5)
    ann = expected[("ann", "audit-priced", now.date().isoformat())]
    assert ann["cached"] == 14 and ann["cost"] > 0

    # The overview of this organization shows the same sums, with its charts drawn.
    page.goto(f"{mortar_server.base_url}/dashboard/?organization={organization.pk}&range=24h")
    expect(page.locator("[data-figure=requests]")).to_have_text("4")
    expect(page.locator("[data-figure=cached_tokens]")).to_have_text("14")
    expect(page.locator(".chart canvas")).to_have_count(6)
    page.close()
