"""Sessions: a conversation's runs together."""

from __future__ import annotations

from dataclasses import replace

from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from core.db_routing import reads_from_replica
from dashboard.forms import SessionForm
from dashboard.selectors.catalog import (
    organization_choices,
)
from dashboard.selectors.sessions import session_summaries
from dashboard.views import access, member_required


@member_required
@require_GET
@reads_from_replica
def sessions(request: HttpRequest) -> HttpResponse:
    seen = access(request).organizations
    form = SessionForm(request.GET, organizations=organization_choices(seen))
    query = replace(form.query(now=timezone.now()), organizations=seen)
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
