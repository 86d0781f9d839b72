"""The admin for the model catalog and its deployments."""

from django.contrib import admin

from gateway.models import CatalogModel, Deployment


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin[Deployment]):
    list_display = ["name", "kind", "stream_default", "scripted_delay_ms"]


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin[CatalogModel]):
    list_display = ["id", "deployment", "context_window", "vision", "surfaces", "deployed"]
    list_filter = ["deployment", "deployed", "surfaces"]
