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
from dashboard.views import staff_required


@staff_required
@require_GET
def budgets(request: HttpRequest) -> HttpResponse:
    """Spend against budget per organization and key, in the current period."""
    return render(request, "dashboard/budgets.html", {"rows": budget_rows(now=timezone.now())})
