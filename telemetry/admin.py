from django.contrib import admin

from telemetry.models import Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
