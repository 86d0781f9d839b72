"""The model catalog and the deployments that serve it."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from billing.costs import Prices
from gateway.catalog.extra_fields import extra_fields_problems
from gateway.catalog.upstream_urls import upstream_url_problem

# The bounds of what operators set, checked wherever they set it (the admin's forms,
# `applyconfig`): what the columns hold, and what a request can be planned with.
PRICE_MAX = Decimal("999999.999999")  # per million tokens: numeric(12, 6)
TIMEOUT_MIN_S = 0.001
TIMEOUT_MAX_S = 86_400.0  # a day: a hold's expiry is computed from the total
SCRIPTED_DELAY_MS_MAX = 60_000
CONTEXT_WINDOW_MAX = 2_147_483_647  # the integer column's

_timeout_bounds = [MinValueValidator(TIMEOUT_MIN_S), MaxValueValidator(TIMEOUT_MAX_S)]
_price_bounds = [MinValueValidator(Decimal(0)), MaxValueValidator(PRICE_MAX)]


class Deployment(models.Model):
    """Where a model's requests go: the built-in scripted model, or (later) model servers."""

    class Kind(models.TextChoices):
        SCRIPTED = "scripted", "Scripted model (built in)"
        UPSTREAM = "upstream", "Model servers (OpenAI-compatible)"

    class OptimizerMode(models.TextChoices):
        SHADOW = "shadow", "Shadow (measure only)"
        ON = "on", "On"
        OFF = "off", "Off"

    class UsageCount(models.TextChoices):
        ESTIMATE = "estimate", "Mortar's estimate"
        VLLM = "vllm", "vLLM: POST /tokenize"
        LLAMA_CPP = "llama.cpp", "llama.cpp server: POST /apply-template, /tokenize"
        LLAMA_CPP_PYTHON = "llama-cpp-python", "llama-cpp-python: POST /extras/tokenize/count"

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
    scripted_delay_ms = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(SCRIPTED_DELAY_MS_MAX)]
    )

    # Upstream deployments: the replicas' base URLs (".../v1"), the model name they expect,
    # and the environment variable holding their API key (never the key itself).
    upstreams = models.JSONField(default=list, blank=True)
    upstream_model = models.CharField(max_length=200, blank=True, default="")
    api_key_env = models.CharField(max_length=100, blank=True, default="")
    connect_timeout_s = models.FloatField(default=5.0, validators=_timeout_bounds)
    first_byte_timeout_s = models.FloatField(default=60.0, validators=_timeout_bounds)
    chunk_timeout_s = models.FloatField(default=60.0, validators=_timeout_bounds)
    total_timeout_s = models.FloatField(default=600.0, validators=_timeout_bounds)
    # Request fields beyond OpenAI's that the model servers take (vLLM's `top_k`, `min_p`,
    # `guided_json`, …): forwarded as the client sent them, unchecked. None by default.
    extra_fields = models.JSONField(
        default=list,
        blank=True,
        help_text='Request fields forwarded as sent, e.g. ["top_k", "min_p", "guided_json"]: '
        "fields the model servers take that Mortar does not know. Empty: none.",
    )
    # Who counts a reply's tokens when the model server's stream carries no usage: Mortar's
    # estimate (its own tokenizer, which need not be the model's), or the model server itself,
    # asked after the reply through its tokenizing endpoint (`gateway/upstream/counting.py`).
    usage_count = models.CharField(
        max_length=20, choices=UsageCount.choices, default=UsageCount.ESTIMATE
    )
    # The model's chat template (Jinja, as its tokenizer configuration or GGUF file holds it),
    # for `llama-cpp-python` counting: that server tokenizes text only, so Mortar renders the
    # conversation as the server would. Blank: ChatML.
    chat_template = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse replica URLs a model server could not be reached at, or that hold
        credentials, extra fields Mortar sets itself, and a chat template that is no Jinja
        template (the admin's form asks; `applyconfig` checks the same)."""
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
        from gateway.upstream.counting import chat_template_problem  # it reads this model

        if problem := chat_template_problem(self.chat_template):
            raise ValidationError({"chat_template": problem})


class CatalogModel(models.Model):
    """A model clients can name in `model`, served by one deployment."""

    class Surfaces(models.TextChoices):
        """The API surfaces a model is served on: OpenAI's chat completions,
        Anthropic's Messages, or both."""

        BOTH = "both", "OpenAI and Anthropic"
        OPENAI = "openai", "OpenAI chat completions only"
        ANTHROPIC = "anthropic", "Anthropic Messages only"

    id = models.CharField(max_length=200, primary_key=True)
    context_window = models.PositiveIntegerField(
        default=4096, validators=[MinValueValidator(1), MaxValueValidator(CONTEXT_WINDOW_MAX)]
    )
    vision = models.BooleanField(default=False)
    deployed = models.BooleanField(default=True)
    deployment = models.ForeignKey(
        Deployment, on_delete=models.PROTECT, null=True, blank=True, related_name="models"
    )
    owned_by = models.CharField(max_length=100, default="mortar")
    created_at = models.DateTimeField(auto_now_add=True)
    # Prices in currency units per million tokens, applied to a run's usage for its cost.
    price_input = models.DecimalField(
        max_digits=12, decimal_places=6, default=0, validators=_price_bounds
    )
    price_cached_input = models.DecimalField(
        max_digits=12, decimal_places=6, default=0, validators=_price_bounds
    )
    price_output = models.DecimalField(
        max_digits=12, decimal_places=6, default=0, validators=_price_bounds
    )
    surfaces = models.CharField(max_length=16, choices=Surfaces.choices, default=Surfaces.BOTH)

    class Meta:
        db_table = "gateway_model"
        verbose_name = "model"
        ordering = ["id"]
        # SQLite stores any number in a decimal column, and a price its column cannot hold
        # would make every read of the catalog fail: refused by the database too.
        constraints = [
            models.CheckConstraint(
                condition=models.Q(**{f"{price}__gte": 0, f"{price}__lte": PRICE_MAX}),
                name=f"gateway_model_{price}_bounds",
            )
            for price in ("price_input", "price_cached_input", "price_output")
        ]

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
