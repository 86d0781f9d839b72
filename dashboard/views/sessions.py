"""Sessions: a conversation's runs together."""

from __future__ import annotations

from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.forms import SessionForm
from dashboard.selectors.catalog import (
    organization_choices,
)
from dashboard.selectors.sessions import session_summaries
from dashboard.views import staff_required


@staff_required
@require_GET
def sessions(request: HttpRequest) -> HttpResponse:
    form = SessionForm(request.GET, organizations=organization_choices())
    query = form.query(now=timezone.now())
    params = request.GET.copy()
    params.pop("sort", None)
    return render(
        request,
        "dashboard/sessions.html",
        {
            "form": form,
            "query": query,
            "sessions": session_summaries(query),
            "params": params.urlencode(),
        },
    )
