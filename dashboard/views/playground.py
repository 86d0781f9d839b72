"""The playground: a prompt sent to any model with a key staff choose, streamed into the page,
and stored as a run like any other."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from core.http.requests import request_id_from
from dashboard.selectors.sending import active_key, active_key_choices, servable_model_names
from dashboard.sending_forms import PlaygroundForm
from dashboard.views import access, admin_required
from gateway.inprocess import send_for_key
from gateway.surfaces.chat import SURFACE as CHAT_COMPLETIONS


def _form(managed: frozenset[int] | None, data: dict[str, str] | None = None) -> PlaygroundForm:
    """The form, offering the keys of the organizations the user manages (None: every one)."""
    return PlaygroundForm(
        data, keys=active_key_choices(organizations=managed), models=servable_model_names()
    )


@admin_required
@require_GET
def playground(request: HttpRequest) -> HttpResponse:
    form = _form(access(request).managed_organizations)
    return render(request, "dashboard/playground.html", {"form": form})


@admin_required
@require_POST
async def playground_send(request: HttpRequest) -> HttpResponseBase:
    """Send the prompt as the chosen key: the gateway's own answer, streamed as it comes (the
    run's id in `X-Mortar-Run-Id`), or the form's errors as JSON (400)."""
    managed = access(request).managed_organizations
    form = await sync_to_async(_valid_form)(managed, request.POST.dict())
    if form.errors:
        return JsonResponse({"errors": form.errors}, status=400)
    key = await sync_to_async(active_key)(form.cleaned_data["key"])
    if key is None:  # revoked or expired since the page was loaded
        return JsonResponse({"errors": {"key": ["The key was revoked or expired."]}}, status=400)
    user = await request.auser()
    return await send_for_key(
        key=key,
        surface=CHAT_COMPLETIONS,
        body=form.body(),
        headers={
            "Accept": "text/event-stream",
            "X-Mortar-End-User-Id": f"dashboard:{user.get_username()}",
        },
        request_id=request_id_from(request.headers),
    )


def _valid_form(managed: frozenset[int] | None, data: dict[str, str]) -> PlaygroundForm:
    form = _form(managed, data)
    form.is_valid()
    return form
