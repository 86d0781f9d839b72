"""Hostile input on every dashboard page, signed in as staff, against a real Mortar process.

Each page gets its own query parameters (and a few it does not know) with values an attacker or
an edited URL would send: NULs and other control characters, unicode of every plane, numbers
past 2^64, days at the ends of the calendar (`9999-12-31`), choices that do not exist; the run
pages get run ids of every shape; the forms that post get hostile fields. Every answer must be
below 500: a filter that is not understood is the form's error, never a server error.

Bounded like tests/fuzz/test_fuzz_api.py: a few hundred requests in all, no shrinking.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

PASSWORD = "a fuzzing staff password"
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')

# Each page's query parameters, as its form names them.
PAGES: dict[str, list[str]] = {
    "/dashboard/": ["range", "organization", "model", "deployment"],
    "/dashboard/live/": [],
    "/dashboard/live/generations.json": [],
    "/dashboard/runs/": [
        *("q", "organization", "key", "model", "deployment", "status", "finish_reason"),
        *("error_code", "cost", "latency", "session", "end_user", "since", "until"),
        *("before", "after"),
    ],
    "/dashboard/playground/": [],
    "/dashboard/sessions/": ["range", "organization", "sort"],
    "/dashboard/spend/": ["range", "organization", "table", "format"],
    "/dashboard/audit/": ["since", "until", "organization", "group", "sort", "page", "format"],
    "/dashboard/budgets/": [],
    "/dashboard/keys/": [],
}
RUN_PAGES = ["{}/", "{}/replay", "{}/download", "{}/images/0", "{}/rerun", "{}/compare/{}/"]

HUGE = st.sampled_from([str(2**63), str(2**64), str(-(2**63) - 1), "1" * 30, "-1", "0"])
HOSTILE_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs", "Zl", "Zp"]), max_size=8),
    st.sampled_from(["\x00", "a\x00b", "%00", "\u202e", "\ufeff", "💥", "' OR 1=1 --", "&|!():*"]),
)
DAYS = st.one_of(
    st.sampled_from(["9999-12-31", "0001-01-01", "9999-12-31T23:59", "0001-01-01T00:00"]),
    st.sampled_from(["2026-02-30", "2026-13-01", "1970-01-01", "-1-01-01", "99999-01-01"]),
    st.dates().map(str),
    st.datetimes().map(lambda d: d.isoformat(timespec="minutes")),
)
CHOICES = st.sampled_from(
    [
        *("1h", "24h", "30d", "scripted", "stop", "length", "completed", "refused", "csv"),
        *("free", "1-up", "5s-up", "model", "key", "day", "-cost", "cost", "last_seen"),
        *("-last_seen", "errors", "ttft", "original", "chatcmpl-0", "2026-01-01"),
    ]
)
VALUES = st.one_of(HOSTILE_TEXT, HUGE, DAYS, CHOICES)
RUN_IDS = st.one_of(
    st.sampled_from(["chatcmpl-" + "0" * 24, "msg_" + "0" * 24, "x" * 41, "%00", "chatcmpl-%00"]),
    st.text(max_size=40).map(lambda s: quote(s, safe="")),
)
BUDGET = {"pages": 450, "run_pages": 200, "forms": 120}


class Tally:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.statuses: Counter[int] = Counter()


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    counted = Tally()
    yield counted
    statuses = dict(sorted(counted.statuses.items()))
    elapsed = time.monotonic() - counted.started
    print(f"\ndashboard fuzz: {sum(statuses.values())} requests in {elapsed:.1f} s, {statuses}")


def check(response: httpx.Response, tally: Tally) -> None:
    response.read()
    tally.statuses[response.status_code] += 1
    note(f"{response.request.method} {response.request.url} -> {response.status_code}")
    assert response.status_code < 500, response.text[:500]


def bounded(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def staff(
    mortar_server: ServerProcess, django_db_setup: None, django_db_blocker
) -> Iterator[httpx.Client]:
    """A client signed in to the dashboard as staff, through its sign-in form."""
    from django.contrib.auth.models import User

    name = f"fuzz-staff-{time.monotonic_ns()}"
    with django_db_blocker.unblock():
        User.objects.create_user(name, password=PASSWORD, is_staff=True)
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as client:
        form = client.get("/dashboard/login/")
        token = CSRF_FIELD.search(form.text)
        assert token is not None
        signed_in = client.post(
            "/dashboard/login/",
            data={"csrfmiddlewaretoken": token.group(1), "username": name, "password": PASSWORD},
        )
        assert signed_in.status_code == 302, signed_in.text
        yield client


@pytest.fixture(scope="module")
def stored_run(mortar_server: ServerProcess, tenant: Tenant) -> str:
    """A run of the tenant's, so the run pages have one to show."""
    answer = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        content=orjson.dumps({"stream": True, "messages": [{"role": "user", "content": "hi"}]}),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    assert answer.status_code == 200
    return answer.headers["X-Mortar-Run-Id"]


def query_for(names: list[str]) -> st.SearchStrategy[list[tuple[str, str]]]:
    """Some of the page's parameters (a name may repeat), and now and then one it does not know."""
    known = st.sampled_from(names) if names else st.nothing()
    return st.lists(st.tuples(st.one_of(known, st.just("x")), VALUES), max_size=5)


def test_no_query_on_any_dashboard_page_gets_a_5xx(staff: httpx.Client, tally: Tally) -> None:
    @bounded(BUDGET["pages"])
    @given(data=st.data(), page=st.sampled_from(sorted(PAGES)))
    def answered(data: st.DataObject, page: str) -> None:
        query = data.draw(query_for(PAGES[page]))
        check(staff.get(page, params=query), tally)

    answered()


def test_the_filters_that_used_to_fail_are_the_form_s_errors(staff: httpx.Client) -> None:
    """A NUL in a runs filter (Postgres refuses it in text) and the calendar's last day in the
    audit (its range ends the day after): each is named in the page's notice."""
    for name in ("model", "deployment", "finish_reason", "error_code", "end_user"):
        page = staff.get("/dashboard/runs/", params={name: "\x00"})
        assert page.status_code == 200, (name, page.text[:300])
        assert "Some filters were not understood" in page.text
        assert "Select a valid choice" in page.text
    page = staff.get("/dashboard/audit/", params={"until": "9999-12-31"})
    assert page.status_code == 200, page.text[:300]
    assert "Some filters were not understood" in page.text
    assert "Pick a day from 1970-01-01 to 9999-12-30." in page.text
    download = staff.get("/dashboard/audit/", params={"until": "9999-12-31", "format": "csv"})
    assert download.status_code == 400
    assert "Pick a day from 1970-01-01 to 9999-12-30." in download.text
    # The other filters still apply: the last day the calendar allows, less one, is fine.
    fine = staff.get("/dashboard/audit/", params={"until": "9999-12-30", "format": "csv"})
    assert fine.status_code == 200
    assert fine.headers["content-type"].startswith("text/csv")


def test_no_run_id_or_query_on_the_run_pages_gets_a_5xx(
    staff: httpx.Client, stored_run: str, tally: Tally
) -> None:
    @bounded(BUDGET["run_pages"])
    @given(
        page=st.sampled_from(RUN_PAGES),
        run_id=st.one_of(st.just(stored_run), RUN_IDS),
        other=st.one_of(st.just(stored_run), RUN_IDS),
        query=query_for(["pace"]),
    )
    def answered(page: str, run_id: str, other: str, query: list[tuple[str, str]]) -> None:
        path = "/dashboard/runs/" + page.format(run_id, other)
        check(staff.get(path, params=query), tally)

    answered()


def test_no_field_posted_to_the_dashboard_s_forms_gets_a_5xx(
    staff: httpx.Client, stored_run: str, tally: Tally
) -> None:
    """The playground, a run's re-run, issuing a key, and stopping a generation."""
    forms = {
        "/dashboard/playground/send": ["model", "key", "messages", "system", "prompt", "stream"],
        f"/dashboard/runs/{stored_run}/rerun": ["key", "model", "request"],
        "/dashboard/keys/": ["organization", "name", "budget_usd", "budget_period"],
        f"/dashboard/runs/{stored_run}/stop": [],
    }

    @bounded(BUDGET["forms"])
    @given(data=st.data(), path=st.sampled_from(sorted(forms)))
    def answered(data: st.DataObject, path: str) -> None:
        fields = data.draw(query_for(forms[path]))
        token = staff.cookies["csrftoken"]
        sent = [("csrfmiddlewaretoken", token), *fields]
        check(staff.post(path, data=dict(sent)), tally)

    answered()
