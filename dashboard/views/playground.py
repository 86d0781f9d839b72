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
from dashboard.views import staff_required
from gateway.inprocess import send_for_key
from gateway.pipeline.surface import CHAT_COMPLETIONS


def _form(data: dict[str, str] | None = None) -> PlaygroundForm:
    return PlaygroundForm(data, keys=active_key_choices(), models=servable_model_names())


@staff_required
@require_GET
def playground(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/playground.html", {"form": _form()})


@staff_required
@require_POST
async def playground_send(request: HttpRequest) -> HttpResponseBase:
    """Send the prompt as the chosen key: the gateway's own answer, streamed as it comes (the
    run's id in `X-Mortar-Run-Id`), or the form's errors as JSON (400)."""
    form = await sync_to_async(_valid_form)(request.POST.dict())
    if form.errors:
        return JsonResponse({"errors": form.errors}, status=400)
    key = await sync_to_async(active_key)(form.cleaned_data["key"])
    if key is None:  # revoked since the page was loaded
        return JsonResponse({"errors": {"key": ["The key was revoked."]}}, status=400)
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


def _valid_form(data: dict[str, str]) -> PlaygroundForm:
    form = _form(data)
    form.is_valid()
    return form
