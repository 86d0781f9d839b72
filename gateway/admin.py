from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from gateway.models import ApiKey, CatalogModel, Deployment, Organization
from gateway.services import key_create


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    # A key is created from an organization and a name by `key_create` (as `manage.py
    # createkey` does); its secret is shown once, on the page that answers the form, and is
    # never stored. Afterwards only the name and the revocation can change.
    list_display = ["prefix", "name", "organization", "created_at", "revoked_at"]
    list_filter = ["organization"]
    readonly_fields = ["organization", "prefix", "digest", "created_at"]
    search_fields = ["prefix", "name"]

    def get_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        if obj is None:
            return ["organization", "name"]
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        return [] if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:  # type: ignore[no-untyped-def]
        if change:
            super().save_model(request, obj, form, change)
            return
        issued = key_create(organization=obj.organization, name=obj.name)
        obj.pk, obj.prefix, obj.digest = issued.key.pk, issued.key.prefix, issued.key.digest
        obj.created_at = issued.key.created_at
        obj._state.adding = False
        request._issued_secret = issued.secret

    def response_add(self, request: HttpRequest, obj, post_url_continue=None) -> HttpResponse:  # type: ignore[no-untyped-def,override]
        # The secret goes straight into this one page, never into a message (which the
        # cookie storage would keep on the client) nor the database.
        response = TemplateResponse(
            request,
            "dashboard/admin_key_secret.html",
            {
                **self.admin_site.each_context(request),
                "key": obj,
                "secret": request._issued_secret,
                "opts": self.model._meta,
                "title": "API key created",
            },
        )
        response["Cache-Control"] = "no-store"
        return response


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "stream_default", "scripted_delay_ms"]


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = ["id", "deployment", "context_window", "vision", "deployed"]
    list_filter = ["deployment", "deployed"]
