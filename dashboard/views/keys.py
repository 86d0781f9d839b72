"""Keys: list, create (the secret shown once), rename and revoke API keys; every change audited.
Staff manage every organization's keys, an organization's admins that organization's."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import ApiKey
from accounts.services import IssuedKey, KeyOperationError, key_issue, key_rename, key_revoke_by_id
from dashboard import services
from dashboard.key_forms import KeyCreateForm, KeyRenameForm
from dashboard.selectors.catalog import model_names
from dashboard.selectors.keys import key_changes, key_rows
from dashboard.views import access, admin_required


@admin_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest) -> HttpResponse:
    """The keys; a POST creates one and answers with its secret, on this one response only."""
    if request.method != "POST":
        return _page(request, _create_form(request))
    form = _create_form(request, request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    issued = key_issue(
        organization=form.cleaned_data["organization"],
        name=form.cleaned_data["name"],
        actor=_user(request),
        limits=form.limits(),
        policy=form.policy(),
    )
    return _page(request, _create_form(request), issued=issued, status=201)


@admin_required
@require_POST
def key_rename_view(request: HttpRequest, key_id: int) -> HttpResponse:
    form = KeyRenameForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(str(message) for message in form.errors.get("name", []))
        return _page(
            request,
            _create_form(request),
            error=f"The key was not renamed: {errors}",
            status=400,
        )
    _managed_key_or_404(request, key_id)
    key_rename(key_id=key_id, name=form.cleaned_data["name"], actor=_user(request))
    return redirect("dashboard:keys")


@admin_required
@require_POST
def key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    _managed_key_or_404(request, key_id)
    try:
        key_revoke_by_id(key_id=key_id, actor=_user(request))
    except KeyOperationError as exc:
        return _page(request, _create_form(request), error=str(exc), status=409)
    return redirect("dashboard:keys")


def _managed_key_or_404(request: HttpRequest, key_id: int) -> None:
    """The key exists and is of an organization the user manages; another's is a 404."""
    organization_id = (
        ApiKey.objects.filter(pk=key_id).values_list("organization_id", flat=True).first()
    )
    if organization_id is None or not access(request).manages(organization_id):
        raise Http404("No such key.")


def _create_form(request: HttpRequest, data: QueryDict | None = None) -> KeyCreateForm:
    return KeyCreateForm(
        data, organizations=access(request).managed_organizations, models=model_names()
    )


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # admin_required let only a signed-in user in
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
    managed = access(request).managed_organizations
    context: dict[str, Any] = {
        "rows": key_rows(organizations=managed),
        "changes": key_changes(organizations=managed),
        "form": form,
        "issued": issued,
        "error": error,
        "now": timezone.now(),
    }
    response = render(request, "dashboard/keys.html", context, status=status)
    # A page with a secret on it must not be kept by the browser or a proxy; nor, to be safe,
    # any other answer of this page (the form's POST answers at the same URL).
    response["Cache-Control"] = "no-store"
    return response
