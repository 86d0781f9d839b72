"""The model catalog and the deployments that serve it."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from billing.costs import Prices
from gateway.catalog.extra_fields import extra_fields_problems
from gateway.catalog.upstream_urls import upstream_url_problem


class Deployment(models.Model):
    """Where a model's requests go: the built-in scripted model, or (later) model servers."""

    class Kind(models.TextChoices):
        SCRIPTED = "scripted", "Scripted model (built in)"
        UPSTREAM = "upstream", "Model servers (OpenAI-compatible)"

    class OptimizerMode(models.TextChoices):
        SHADOW = "shadow", "Shadow (measure only)"
        ON = "on", "On"
        OFF = "off", "Off"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.SCRIPTED)
    # What a deployment lets `X-Mortar-Optimize` do: in shadow mode, the default, nothing is
    # changed, only measured, and when it is off no header value turns optimization on.
    optimizer_mode = models.CharField(
        max_length=8, choices=OptimizerMode.choices, default=OptimizerMode.SHADOW
    )
    # `stream` defaults to true (a plain `curl` gets the stream); a deployment may make it false.
    stream_default = models.BooleanField(default=True)
    # Pause between streamed pieces of the scripted model, so live views and stopping can be
    # shown on it.
    scripted_delay_ms = models.PositiveIntegerField(default=0)

    # Upstream deployments: the replicas' base URLs (".../v1"), the model name they expect,
    # and the environment variable holding their API key (never the key itself).
    upstreams = models.JSONField(default=list, blank=True)
    upstream_model = models.CharField(max_length=200, blank=True, default="")
    api_key_env = models.CharField(max_length=100, blank=True, default="")
    connect_timeout_s = models.FloatField(default=5.0)
    first_byte_timeout_s = models.FloatField(default=60.0)
    chunk_timeout_s = models.FloatField(default=60.0)
    total_timeout_s = models.FloatField(default=600.0)
    # Request fields beyond OpenAI's that the model servers take (vLLM's `top_k`, `min_p`,
    # `guided_json`, …): forwarded as the client sent them, unchecked. None by default.
    extra_fields = models.JSONField(
        default=list,
        blank=True,
        help_text='Request fields forwarded as sent, e.g. ["top_k", "min_p", "guided_json"]: '
        "fields the model servers take that Mortar does not know. Empty: none.",
    )

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse replica URLs a model server could not be reached at, or that hold
        credentials, and extra fields Mortar sets itself (the admin's form asks;
        `applyconfig` checks the same)."""
        if not isinstance(self.extra_fields, list):
            raise ValidationError({"extra_fields": 'A list of field names, such as ["top_k"].'})
        extra_problems = extra_fields_problems(self.extra_fields)
        if extra_problems:
            raise ValidationError({"extra_fields": extra_problems})
        if not isinstance(self.upstreams, list) or not all(
            isinstance(url, str) for url in self.upstreams
        ):
            raise ValidationError({"upstreams": "A list of base URLs, such as http://host/v1."})
        problems = [problem for url in self.upstreams if (problem := upstream_url_problem(url))]
        if problems:
            raise ValidationError({"upstreams": problems})


class CatalogModel(models.Model):
    """A model clients can name in `model`, served by one deployment."""

    class Surfaces(models.TextChoices):
        """The API surfaces a model is served on: OpenAI's chat completions,
        Anthropic's Messages, or both."""

        BOTH = "both", "OpenAI and Anthropic"
        OPENAI = "openai", "OpenAI chat completions only"
        ANTHROPIC = "anthropic", "Anthropic Messages only"

    id = models.CharField(max_length=200, primary_key=True)
    context_window = models.PositiveIntegerField(default=4096)
    vision = models.BooleanField(default=False)
    deployed = models.BooleanField(default=True)
    deployment = models.ForeignKey(
        Deployment, on_delete=models.PROTECT, null=True, blank=True, related_name="models"
    )
    owned_by = models.CharField(max_length=100, default="mortar")
    created_at = models.DateTimeField(auto_now_add=True)
    # Prices in currency units per million tokens, applied to a run's usage for its cost.
    price_input = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    price_cached_input = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    price_output = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    surfaces = models.CharField(max_length=16, choices=Surfaces.choices, default=Surfaces.BOTH)

    class Meta:
        db_table = "gateway_model"
        verbose_name = "model"
        ordering = ["id"]

    def __str__(self) -> str:
        return self.id

    @property
    def prices(self) -> Prices:
        return Prices(
            input=self.price_input,
            cached_input=self.price_cached_input,
            output=self.price_output,
        )

    @property
    def is_servable(self) -> bool:
        return self.deployed and self.deployment_id is not None

    def serves(self, surface: str) -> bool:
        """Whether requests on `surface` (`openai` or `anthropic`) may name this model."""
        return self.surfaces in (CatalogModel.Surfaces.BOTH, surface)
