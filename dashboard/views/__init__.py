"""The operator dashboard's pages, one module per page: each view parses its filters, calls a
selector or a service, and renders. Every page is for staff only (`staff_required`); every POST is
CSRF-checked by Django's middleware."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.admin.views.decorators import staff_member_required

View = TypeVar("View", bound=Callable[..., Any])


def staff_required(view: View) -> View:
    """Staff only: anyone else is sent to the dashboard's sign-in."""
    return staff_member_required(view, login_url="dashboard:login")
