from django.contrib import admin
from django.http import HttpRequest

from core.ids import is_run_id
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

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Run | None:
        # An id that could name no run (a NUL would be a database error) is simply not found.
        if not is_run_id(object_id):
            return None
        return super().get_object(request, object_id, from_field)

    def has_change_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        return False
