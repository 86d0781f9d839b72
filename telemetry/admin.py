from django.contrib import admin
from django.http import HttpRequest

from telemetry.models import Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = [
        "id",
        "organization",
        "model",
        "status",
        "http_status",
        "finish_reason",
        "accepted_at",
    ]
    list_filter = ["status", "organization", "model"]
    search_fields = ["id", "session", "end_user", "request_id"]
    date_hierarchy = "accepted_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return False
