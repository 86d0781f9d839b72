"""Organizations: each one's settings, and the switch to OpenAI's exact reply shape."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Organization
from accounts.services import organization_set_finish_chunk_delta
from dashboard.views import staff_required


@staff_required
@require_GET
def organizations(request: HttpRequest) -> HttpResponse:
    """Every organization with its settings."""
    rows = Organization.objects.order_by("name")
    return render(request, "dashboard/organizations.html", {"rows": rows})


@staff_required
@require_POST
def organization_finish_chunk_delta(request: HttpRequest, organization_id: int) -> HttpResponse:
    """Save the organization's `finish_chunk_delta`: a checked box is on, none is off."""
    try:
        organization_set_finish_chunk_delta(
            organization_id=organization_id, on=request.POST.get("finish_chunk_delta") == "on"
        )
    except Organization.DoesNotExist:
        raise Http404("No such organization.") from None
    return redirect("dashboard:organizations")
