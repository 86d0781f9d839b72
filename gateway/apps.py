from django.apps import AppConfig

from telemetry.metrics import KnownLabels, known_labels_from


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from core.lookups import forget_lookups_when_saved
        from gateway.models import CatalogModel, Deployment

        forget_lookups_when_saved(CatalogModel, Deployment)
        known_labels_from(catalog_labels)
        # Each surface registers itself as its package loads: the pipeline, re-runs and the
        # dashboard find them by name or by a run's id from the start.
        from gateway.surfaces import surfaces_load

        surfaces_load()


def catalog_labels() -> KnownLabels:
    """The catalog's models, and its deployments that forward to model servers: the label
    sets of the metrics, exposed at 0 before their first event."""
    from gateway.errors import UPSTREAM_ERROR_CODES
    from gateway.models import CatalogModel, Deployment

    return KnownLabels(
        models=list(CatalogModel.objects.values_list("id", flat=True)),
        deployments=list(
            Deployment.objects.filter(kind=Deployment.Kind.UPSTREAM).values_list("name", flat=True)
        ),
        upstream_error_codes=UPSTREAM_ERROR_CODES,
    )
