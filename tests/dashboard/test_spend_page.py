"""The Spend page driven in headless Chromium against a real server: requests of two end users
through two keys, one refused, then the page's figures, its charts (drawn with the runs' data),
its tables and their CSV, checked against the stored runs."""

from __future__ import annotations

import csv
import io
import time
import uuid
from decimal import Decimal
from pathlib import Path

import httpx
import orjson
import pytest
from django.db.models import Count, Q, Sum
from playwright.sync_api import expect

from accounts.models import Organization
from dashboard.templatetags.dashboard import money
from telemetry.models import Run
from tests.conftest import manage
from tests.dashboard.conftest import sign_in
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

CONFIG = """
models:
  - id: spend-priced
    deployment: mock-one
    prices: {{input: 2.0, cached_input: 0.5, output: 8.0}}
organizations:
  - name: {organization}
"""
SENT = (
    ("ci", "ann", "spend-priced", "Hi [mock chunks=4 cached=7]", {}),
    ("ci", "ann", "spend-priced", "Again [mock chunks=2 cached=7]", {}),
    ("bot", "ben", "spend-priced", "Hello [mock chunks=3]", {}),
    ("bot", "ben", "Qwen/Qwen2.5-7B-Instruct", "What does max_tokens limit?", {}),
    ("bot", "ben", "spend-priced", "Too hot", {"temperature": 5}),  # 400 invalid_parameter
)


def stored_runs(organization: Organization, count: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        finished = Run.objects.filter(organization=organization).exclude(status="in_progress")
        if finished.count() == count:
            return
        time.sleep(0.1)
    raise AssertionError("the runs were not stored")


def test_operator_reads_spend_by_end_user_key_and_model_with_charts_and_csv(
    browser, mortar_server: ServerProcess, upstream_models, dashboard_users, tmp_path: Path
) -> None:
    name = f"spend-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "spend.yaml"
    config.write_text(CONFIG.format(organization=name))
    manage("applyconfig", str(config))
    secrets = {key: manage("createkey", name, "--name", key).strip() for key in ("ci", "bot")}
    organization = Organization.objects.get(name=name)
    for key, end_user, model, content, extra in SENT:
        response = httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": model,
                    "messages": [{"role": "user", "content": content}],
                    "stream": False,
                    **extra,
                }
            ),
            headers={"Authorization": f"Bearer {secrets[key]}", "X-Mortar-End-User-Id": end_user},
            timeout=15,
        )
        assert response.status_code == (400 if extra else 200), response.text
    stored_runs(organization, len(SENT))
    runs = Run.objects.filter(organization=organization)
    by_user = {
        row["end_user"]: row
        for row in runs.values("end_user").annotate(
            requests=Count("pk"), cost=Sum("cost"), cached=Sum("cached_tokens")
        )
    }
    total = runs.aggregate(cost=Sum("cost"))["cost"]
    completed = runs.filter(status=Run.Status.COMPLETED).count()
    assert completed == 4 and by_user["ann"]["cached"] == 14

    page = browser.new_page(accept_downloads=True, viewport={"width": 1440, "height": 900})
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path="/dashboard/spend/")
    page.wait_for_url("**/dashboard/spend/")
    page.select_option("#spend-form select[name=organization]", str(organization.pk))
    page.click("#spend-form button[type=submit]")
    page.wait_for_url(f"**organization={organization.pk}**")

    expect(page.locator("[data-figure=requests]")).to_have_text("5")
    expect(page.locator("[data-figure=errors]")).to_have_text("1")
    expect(page.locator("[data-figure=cost]")).to_have_text(money(total))
    # 14 cached tokens of spend-priced, each $1.50 per million cheaper than an input token.
    expect(page.locator("[data-figure=savings]")).to_have_text("$0.000021")

    # Every chart is drawn, and with the runs' figures: a line per end user summing to what
    # each spent, the histograms counting the completed runs.
    expect(page.locator("#spend-charts .chart canvas")).to_have_count(6)
    lines = page.evaluate(
        """() => {
            const u = window.spendCharts.end_user;
            const sum = (values) => values.reduce((a, b) => a + b, 0);
            return u.series.slice(1).map((s, i) => [s.label, sum(u.data[i + 1])]);
        }"""
    )
    # The refused request is refused before its end user is read: it has none.
    assert set(by_user) == {"ann", "ben", ""}
    assert {label for label, _ in lines} == {"ann", "ben", "(none)"}
    for label, spent in lines:
        want = by_user["" if label == "(none)" else label]["cost"] or 0
        assert spent == pytest.approx(float(want), rel=1e-9)
    for histogram in ("latency", "ttft"):
        drawn = page.evaluate(f"() => window.spendCharts.{histogram}.data[1]")
        assert sum(drawn) == completed, histogram
    key_lines = page.evaluate("() => window.spendCharts.key.series.slice(1).map(s => s.label)")
    assert sorted(label.split()[-1] for label in key_lines) == ["bot", "ci"]

    # The tables: the biggest spender first, the refused request under its code.
    ranked = sorted(by_user, key=lambda user: by_user[user]["cost"] or 0, reverse=True)
    values = page.locator("#top-end_user tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.value)"
    )
    assert values == ranked
    expect(page.locator("#errors-by-code tr[data-code=invalid_parameter] td").nth(1)).to_have_text(
        "1"
    )
    models = page.locator("#top-model tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.value)"
    )
    assert set(models) == {"spend-priced", "Qwen/Qwen2.5-7B-Instruct", ""}  # "": the refused one

    # The end users' CSV: every row, exact figures.
    with page.expect_download() as download:
        page.click("a[data-csv=end_user]")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [row["end_user"] for row in rows] == ranked
    for row in rows:
        want = by_user[row["end_user"]]
        assert int(row["requests"]) == want["requests"]
        assert Decimal(row["cost"]) == (want["cost"] or 0)
    ann = next(row for row in rows if row["end_user"] == "ann")
    assert Decimal(ann["cache_savings"]) == Decimal("0.000021")
    assert int(next(r for r in rows if r["end_user"] == "")["errors"]) == 1

    with page.expect_download() as download:
        page.click("a[data-csv=errors]")
    errors = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert errors == [{"error_code": "invalid_parameter", "errors": "1"}]

    # Another range: a point a day, the same sums.
    page.select_option("#spend-form select[name=range]", "7d")
    page.click("#spend-form button[type=submit]")
    page.wait_for_url("**range=7d**")
    expect(page.locator("[data-figure=requests]")).to_have_text("5")
    days = page.evaluate("() => window.spendCharts.model.data[0].length")
    assert days in (7, 8)
    errors_left = runs.filter(~Q(error_code="")).count()
    assert errors_left == 1
    widths = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
    wide = page.evaluate(
        """() => [...document.querySelectorAll('main *')]
            .filter(e => e.getBoundingClientRect().right > innerWidth)
            .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)"""
    )
    assert widths[0] <= widths[1], wide
    page.close()
