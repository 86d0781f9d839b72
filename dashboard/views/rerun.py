"""A run's re-run (its stored request sent again, as it was or edited, with a key staff choose)
and the compare page that shows a run and its re-run side by side."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from core.http.requests import request_id_from
from dashboard.access import Access
from dashboard.selectors.compare import run_comparison
from dashboard.selectors.images import body_as_received
from dashboard.selectors.runs import body_text, run_detail
from dashboard.selectors.sending import active_key, active_key_choices, servable_model_names
from dashboard.sending_forms import RerunForm
from dashboard.views import access, admin_required, member_required, seen_or_404
from gateway.inprocess import drained
from gateway.reruns import rerun_send, rerun_source
from telemetry.errors import RunGone
from telemetry.models import Run

# How long the page waits for the re-run's outcome to be stored before showing the comparison
# (a generation that takes longer is shown in progress; its page fills in on reload).
STORED_WAIT_SECONDS = 5.0


@dataclass
class RerunPage:
    run: Run
    form: RerunForm
    sendable: bool


def _rerun_page(found: Access, run_id: str, data: dict[str, str] | None = None) -> RerunPage:
    run = run_detail(run_id)
    if run is None or not found.sees(run.organization_id):
        raise Http404(f"No run {run_id}")
    if not found.manages(run.organization_id):
        raise PermissionDenied("Only the organization's admins may re-run its runs.")
    stored = body_as_received(run.pk, run.request_body)
    initial = {
        "request": body_text(stored) or "",
        "key": run.api_key_id if run.api_key and run.api_key.is_active else None,
    }
    form = RerunForm(
        data,
        initial=initial,
        keys=active_key_choices(organization_id=run.organization_id),
        models=servable_model_names(),
        stored_model=run.model,
    )
    return RerunPage(run=run, form=form, sendable=stored is not None and not run.request_truncated)


@admin_required
@require_http_methods(["GET", "POST"])
async def run_rerun(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """GET: the form (the stored request to edit, a key and a model); POST: send it and show
    the comparison."""
    data = request.POST.dict() if request.method == "POST" else None
    page = await sync_to_async(_rerun_page)(access(request), run_id, data)
    if request.method == "POST" and page.sendable and page.form.is_valid():
        new_id = await _send(request, page)
        if new_id is not None:
            return redirect("dashboard:run-compare", run_id=run_id, other_id=new_id)
    # Rendered on a worker thread: the page's header reads the signed-in user (a query).
    return await sync_to_async(render)(
        request,
        "dashboard/rerun.html",
        {"run": page.run, "form": page.form, "sendable": page.sendable},
        status=400 if request.method == "POST" else 200,
    )


async def _send(request: HttpRequest, page: RerunPage) -> str | None:
    """Send the form's request as a re-run of the page's run; the new run's id, or None with
    the reason added to the form."""
    form = page.form
    key = await sync_to_async(active_key)(form.cleaned_data["key"])
    if key is None or key.organization_id != page.run.organization_id:
        form.add_error("key", "Choose an active key of the run's organization.")
        return None
    try:
        source = await rerun_source(page.run.pk, key.organization)
    except RunGone as gone:
        form.add_error(None, gone.message)
        return None
    user = await request.auser()
    response = await rerun_send(
        source=source,
        key=key,
        body=form.body(),
        headers={
            "Accept": "text/event-stream, application/json",
            "X-Mortar-End-User-Id": f"dashboard:{user.get_username()}",
        },
        request_id=request_id_from({}),
    )
    await drained(response)
    new_id = response["X-Mortar-Run-Id"]
    await _stored(new_id)
    return new_id


async def _stored(run_id: str) -> None:
    """Wait (a little) until the writer has stored the run's outcome."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STORED_WAIT_SECONDS
    while loop.time() < deadline:
        done = await Run.objects.filter(pk=run_id).exclude(status=Run.Status.IN_PROGRESS).aexists()
        if done:
            return
        await asyncio.sleep(0.05)


@member_required
@require_GET
def run_compare(request: HttpRequest, run_id: str, other_id: str) -> HttpResponse:
    comparison = run_comparison(run_id, other_id)
    if comparison is None:
        raise Http404(f"No run {run_id} or {other_id}")
    for compared in (comparison.left, comparison.right):
        seen_or_404(request, compared.run.organization_id, f"run {compared.run.pk}")
    return render(
        request,
        "dashboard/compare.html",
        {"c": comparison, "facts": comparison.facts()},
    )
