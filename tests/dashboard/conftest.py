"""Fixtures for the dashboard: staff and non-staff accounts, and Debian's Chromium under
Playwright, signed in through the real sign-in form."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

DASHBOARD_PASSWORD = "a dashboard password for tests"
STAFF = "dash-staff"
VISITOR = "dash-visitor"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="session")
def dashboard_users(django_db_setup: None, django_db_blocker) -> dict[str, str]:
    """A staff and a non-staff account, committed so server processes see them."""
    from django.contrib.auth.models import User

    with django_db_blocker.unblock():
        for name, staff in ((STAFF, True), (VISITOR, False)):
            user, _ = User.objects.get_or_create(username=name, defaults={"is_staff": staff})
            user.set_password(DASHBOARD_PASSWORD)
            user.save()
    return {"staff": STAFF, "visitor": VISITOR}


def chromium_path() -> str:
    found = os.environ.get("MORTAR_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail(
            "the dashboard's browser tests need Debian's chromium (apt-get install chromium)"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium for one test module.

    Playwright's sync API keeps an event loop marked as running in this thread while it is
    started, so Django would refuse the test's own (synchronous, safe) ORM calls; the flag
    below lifts that check for this module only. Those calls get connections of their own
    (Django keeps one per async context), closed here before the loop goes away, or they
    would hold the test database open past the session.
    """
    from django.db import connections
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()
    finally:
        connections.close_all()
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def sign_in(page, base_url: str, username: str, *, next_path: str = "/dashboard/") -> None:  # type: ignore[no-untyped-def]
    """Open a dashboard page, get sent to the sign-in form, fill it in and submit it."""
    page.goto(f"{base_url}{next_path}")
    page.wait_for_url("**/dashboard/login/**")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DASHBOARD_PASSWORD)
    page.click("button[type=submit]")
