from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from core.lookups import forget_lookups_when_saved
        from gateway.models import CatalogModel, Deployment

        forget_lookups_when_saved(CatalogModel, Deployment)
