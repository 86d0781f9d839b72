"""Keys: list, create (the secret shown once), rename and revoke API keys; every change audited."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import ApiKey
from accounts.services import IssuedKey, KeyOperationError, key_issue, key_rename, key_revoke_by_id
from dashboard import services
from dashboard.key_forms import KeyCreateForm, KeyRenameForm
from dashboard.selectors.keys import key_changes, key_rows
from dashboard.views import staff_required


@staff_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest) -> HttpResponse:
    """The keys; a POST creates one and answers with its secret, on this one response only."""
    if request.method != "POST":
        return _page(request, KeyCreateForm())
    form = KeyCreateForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    issued = key_issue(
        organization=form.cleaned_data["organization"],
        name=form.cleaned_data["name"],
        actor=_staff(request),
        limits=form.limits(),
    )
    return _page(request, KeyCreateForm(), issued=issued, status=201)


@staff_required
@require_POST
def key_rename_view(request: HttpRequest, key_id: int) -> HttpResponse:
    form = KeyRenameForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(str(message) for message in form.errors.get("name", []))
        return _page(
            request, KeyCreateForm(), error=f"The key was not renamed: {errors}", status=400
        )
    try:
        key_rename(key_id=key_id, name=form.cleaned_data["name"], actor=_staff(request))
    except ApiKey.DoesNotExist:
        raise Http404("No such key.") from None
    return redirect("dashboard:keys")


@staff_required
@require_POST
def key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    try:
        key_revoke_by_id(key_id=key_id, actor=_staff(request))
    except ApiKey.DoesNotExist:
        raise Http404("No such key.") from None
    except KeyOperationError as exc:
        return _page(request, KeyCreateForm(), error=str(exc), status=409)
    return redirect("dashboard:keys")


def _staff(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # staff_required let only a signed-in user in
    return user


def _page(
    request: HttpRequest,
    form: KeyCreateForm,
    *,
    issued: IssuedKey | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    services.usage_rollups_refresh_without_beat()
    context: dict[str, Any] = {
        "rows": key_rows(),
        "changes": key_changes(),
        "form": form,
        "issued": issued,
        "error": error,
    }
    response = render(request, "dashboard/keys.html", context, status=status)
    # A page with a secret on it must not be kept by the browser or a proxy; nor, to be safe,
    # any other answer of this page (the form's POST answers at the same URL).
    response["Cache-Control"] = "no-store"
    return response
