"""The operator dashboard's pages, one module per page: each view parses its filters, calls a
selector or a service, and renders. Every page is for dashboard users only: staff, or members of
an organization, who see only theirs (`dashboard.access`); the Keys, Budgets and Playground
pages and a run's re-run and Stop are for staff and organization admins (`admin_required`);
the Organizations page is for staff only (`staff_required`).
Every POST is CSRF-checked by Django's middleware."""

from __future__ import annotations

import functools
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any, TypeVar, cast

from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseBase

from dashboard.access import Access, access_of

View = TypeVar("View", bound=Callable[..., Any])

# Where a view finds the signed-in user's access once its decorator has read it.
ACCESS_ATTRIBUTE = "dashboard_access"


def access(request: HttpRequest) -> Access:
    """The signed-in user's access, read by the view's decorator."""
    found = getattr(request, ACCESS_ATTRIBUTE, None)
    assert isinstance(found, Access), "the view declares no member_required or admin_required"
    return found


def _guarded(view: View, *, admin: bool = False, staff: bool = False) -> View:
    def checked(request: HttpRequest, found: Access | None) -> HttpResponseBase | None:
        if found is None:
            # Anonymous, or signed in without a role: the sign-in page says which.
            return redirect_to_login(request.get_full_path(), "dashboard:login")
        if admin and not found.manages_any:
            raise PermissionDenied("Only organization admins and staff may use this page.")
        if staff and not found.staff:
            raise PermissionDenied("Only staff may use this page.")
        setattr(request, ACCESS_ATTRIBUTE, found)
        return None

    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_guard(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            user = await request.auser()
            refused = checked(request, await sync_to_async(access_of)(user))
            if refused is not None:
                return refused
            return await view(request, *args, **kwargs)

        return cast(View, async_guard)

    @functools.wraps(view)
    def guard(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        refused = checked(request, access_of(request.user))
        if refused is not None:
            return refused
        return view(request, *args, **kwargs)

    return cast(View, guard)


def member_required(view: View) -> View:
    """Staff and members of an organization; anyone else is sent to the dashboard's sign-in."""
    return _guarded(view, admin=False)


def admin_required(view: View) -> View:
    """Staff and admins of an organization; a viewer gets 403, anyone else the sign-in."""
    return _guarded(view, admin=True)


def staff_required(view: View) -> View:
    """Staff only; an organization's member gets 403, anyone else the sign-in."""
    return _guarded(view, staff=True)


def seen_or_404(request: HttpRequest, organization_id: int | None, what: str) -> None:
    """Another organization's thing is not found, as if it did not exist."""
    if not access(request).sees(organization_id):
        raise Http404(f"No {what}")
