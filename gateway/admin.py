from django.contrib import admin

from gateway.models import ApiKey, CatalogModel, Deployment, Organization


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    # Keys are created with `manage.py createkey` (the secret is shown once) and never edited.
    list_display = ["prefix", "name", "organization", "created_at", "revoked_at"]
    list_filter = ["organization"]
    readonly_fields = ["organization", "prefix", "digest", "created_at"]
    search_fields = ["prefix", "name"]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "stream_default", "scripted_delay_ms"]


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = ["id", "deployment", "context_window", "vision", "deployed"]
    list_filter = ["deployment", "deployed"]
