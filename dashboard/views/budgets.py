"""Budgets: spend against budget."""

from __future__ import annotations

from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.selectors.budgets import budget_rows
from dashboard.views import access, admin_required


@admin_required
@require_GET
def budgets(request: HttpRequest) -> HttpResponse:
    """Spend against budget per organization and key, in the current period."""
    rows = budget_rows(now=timezone.now(), organizations=access(request).managed_organizations)
    return render(request, "dashboard/budgets.html", {"rows": rows})
