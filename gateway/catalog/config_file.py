"""The declarative configuration file that `manage.py applyconfig FILE.yaml` applies.

    deployments:
      - name: vllm-a
        upstreams: ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"]
        upstream_model: Qwen/Qwen2.5-7B-Instruct   # the name the model server expects
        api_key_env: VLLM_API_KEY                  # optional
        stream: true                               # optional: the `stream` default
        optimizer: shadow                          # optional: shadow | on | off
        timeouts: {connect: 5, first_byte: 60, between_chunks: 60, total: 600}  # optional
        extra_fields: [top_k, min_p, guided_json]  # optional: forwarded as sent; default none
        usage_count: vllm     # optional: estimate | vllm | llama.cpp | llama-cpp-python
        chat_template: ""     # optional: the model's chat template, for llama-cpp-python
    models:
      - id: qwen-upstream                          # the name clients send
        deployment: vllm-a
        context_window: 32768
        vision: false                              # optional
        surfaces: [openai, anthropic]              # optional: the routes that serve it
        deployed: true                             # optional
        prices: {input: 0.20, cached_input: 0.05, output: 0.60}  # per million tokens
    organizations:
      - name: acme
        retention: full                            # optional: full | metadata
        retention_days: 30                         # optional
        optimize_default: "on"                     # optional: on | off
        finish_chunk_delta: false                  # optional: "delta": {} on the finish chunk
        budget: {usd: 25.00, period: month}        # optional: period day | month | total
        rate_limits: {requests_per_minute: 600, tokens_per_minute: 200000}  # optional
    keys:
      - prefix: mk-1a2b3c4d                        # an active key's visible prefix
        models: [qwen-upstream]                    # optional: the only models it may use
        expires_at: 2027-01-31T00:00:00Z           # optional: when it stops working (UTC)

Applying is idempotent: each entry is created or updated by its name; nothing is deleted.
Keys are made with `manage.py createkey` (their secrets never go in a file); an entry of `keys`
sets the policy of the one active key whose visible prefix starts with `prefix`.
A deployment without `upstreams` is a scripted one (`scripted_delay_ms` sets its pace).
A deployment's `usage_count` says who counts a reply's tokens when the model server's stream
reports no usage: Mortar's estimate (the default), or the model server's own counting endpoint
(`gateway/upstream/counting.py`), its runs' `usage_source` then `upstream_count`.
A model's `surfaces` lists the APIs that may name it: `openai` (`POST /v1/chat/completions`),
`anthropic` (`POST /v1/messages`), or both, the default. A request on a route the model is not
served on is refused with 400, naming the route that serves it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

import yaml
from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from accounts.models import (
    BUDGET_USD_MAX,
    BUDGET_USD_MIN,
    PER_MINUTE_MAX,
    RETENTION_DAYS_MAX,
    Organization,
)
from accounts.services import KeyOperationError, KeyPolicy, key_by_prefix, key_policy_set
from gateway.catalog.extra_fields import extra_fields_problems
from gateway.catalog.upstream_urls import upstream_url_problem
from gateway.models import (
    CONTEXT_WINDOW_MAX,
    PRICE_MAX,
    SCRIPTED_DELAY_MS_MAX,
    TIMEOUT_MAX_S,
    TIMEOUT_MIN_S,
    CatalogModel,
    Deployment,
)
from gateway.upstream.counting import chat_template_problem


class ConfigError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _timeout(default: float) -> Any:
    return Field(default, ge=TIMEOUT_MIN_S, le=TIMEOUT_MAX_S)


def _price() -> Any:
    return Field(Decimal(0), ge=0, le=PRICE_MAX, max_digits=12, decimal_places=6)


class Timeouts(_Strict):
    connect: float = _timeout(5.0)
    first_byte: float = _timeout(60.0)
    between_chunks: float = _timeout(60.0)
    total: float = _timeout(600.0)


class DeploymentEntry(_Strict):
    name: str = Field(min_length=1, max_length=100)
    upstreams: list[str] = Field(default_factory=list)
    upstream_model: str = ""
    api_key_env: str = ""
    stream: bool = True
    scripted_delay_ms: int = Field(0, ge=0, le=SCRIPTED_DELAY_MS_MAX)
    optimizer: Literal["shadow", "on", "off"] = "shadow"
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())
    usage_count: Literal["estimate", "vllm", "llama.cpp", "llama-cpp-python"] = "estimate"
    chat_template: str = Field("", max_length=100_000)
    extra_fields: list[str] = Field(default_factory=list)

    @field_validator("extra_fields")
    @classmethod
    def _extra_fields(cls, names: list[str]) -> list[str]:
        problems = extra_fields_problems(names)
        if problems:
            raise ValueError("; ".join(problems))
        return names

    @field_validator("upstreams")
    @classmethod
    def _urls(cls, upstreams: list[str]) -> list[str]:
        for url in upstreams:
            problem = upstream_url_problem(url)
            if problem is not None:
                raise ValueError(problem)
        if len(set(upstreams)) != len(upstreams):
            raise ValueError("an upstream is listed twice")
        return [url.rstrip("/") for url in upstreams]

    @field_validator("chat_template")
    @classmethod
    def _template(cls, template: str) -> str:
        problem = chat_template_problem(template)
        if problem is not None:
            raise ValueError(problem)
        return template


class Prices(_Strict):
    input: Decimal = _price()
    cached_input: Decimal = _price()
    output: Decimal = _price()


Surface = Literal["openai", "anthropic"]
SURFACES: tuple[Surface, ...] = ("openai", "anthropic")


class ModelEntry(_Strict):
    id: str = Field(min_length=1, max_length=200)
    deployment: str
    context_window: int = Field(4096, gt=0, le=CONTEXT_WINDOW_MAX)
    vision: bool = False
    surfaces: list[Surface] = Field(default_factory=lambda: list(SURFACES), min_length=1)
    deployed: bool = True
    prices: Prices = Field(default_factory=lambda: Prices())

    @field_validator("surfaces")
    @classmethod
    def _distinct_surfaces(cls, surfaces: list[Surface]) -> list[Surface]:
        if len(set(surfaces)) != len(surfaces):
            raise ValueError("a surface is listed twice")
        return surfaces

    @property
    def surfaces_value(self) -> str:
        """The catalog's value for the listed surfaces (`CatalogModel.Surfaces`)."""
        if len(self.surfaces) == 2:
            return CatalogModel.Surfaces.BOTH
        return self.surfaces[0]


class BudgetEntry(_Strict):
    usd: Decimal = Field(ge=BUDGET_USD_MIN, le=BUDGET_USD_MAX, max_digits=14, decimal_places=6)
    period: Literal["day", "month", "total"] = "month"


class RateLimitsEntry(_Strict):
    requests_per_minute: int | None = Field(None, gt=0, le=PER_MINUTE_MAX)
    tokens_per_minute: int | None = Field(None, gt=0, le=PER_MINUTE_MAX)


class OrganizationEntry(_Strict):
    name: str = Field(min_length=1, max_length=200)
    retention: Literal["full", "metadata"] = "full"
    retention_days: int = Field(30, gt=0, le=RETENTION_DAYS_MAX)
    optimize_default: Literal["on", "off"] = "on"
    finish_chunk_delta: bool = False
    budget: BudgetEntry | None = None  # absent: no budget
    rate_limits: RateLimitsEntry | None = None  # absent: no limits

    def spend_limits(self) -> dict[str, object]:
        """The organization's spend-limit fields; what the file leaves out is no limit."""
        budget, limits = self.budget, self.rate_limits or RateLimitsEntry()
        return {
            "budget_usd": budget.usd if budget else None,
            "budget_period": budget.period if budget else "month",
            "requests_per_minute": limits.requests_per_minute,
            "tokens_per_minute": limits.tokens_per_minute,
        }


class KeyEntry(_Strict):
    prefix: str = Field(min_length=4, max_length=16)
    models: list[str] = Field(default_factory=list)  # absent: every model
    expires_at: datetime | None = None  # absent: never; no zone: UTC

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, models: list[str]) -> list[str]:
        if len(set(models)) != len(models):
            raise ValueError("a model is listed twice")
        return models

    def policy(self) -> KeyPolicy:
        expires_at = self.expires_at
        if expires_at is not None:
            expires_at = (
                expires_at.replace(tzinfo=UTC)
                if expires_at.tzinfo is None
                else expires_at.astimezone(UTC)
            )
        return KeyPolicy(allowed_models=tuple(self.models), expires_at=expires_at)


class ConfigFile(_Strict):
    deployments: list[DeploymentEntry] = Field(default_factory=list)
    models: list[ModelEntry] = Field(default_factory=list)
    organizations: list[OrganizationEntry] = Field(default_factory=list)
    keys: list[KeyEntry] = Field(default_factory=list)


def parse_config(text: str) -> ConfigFile:
    try:
        data: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"The file is not valid YAML: {exc}") from None
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{field_name(data, error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ConfigError(f"The configuration is not valid: {problems}") from None


def field_name(data: Any, loc: tuple[int | str, ...]) -> str:
    """The failing field as the file names it: `models[qwen].prices.input` — an entry by its
    `id` or `name` where it has one, else by its position."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(part, int):
            entry = node[part] if isinstance(node, list) and part < len(node) else None
            label = entry.get("id", entry.get("name")) if isinstance(entry, dict) else None
            parts.append(f"[{label}]" if isinstance(label, str | int) else f"[{part}]")
            node = entry
        else:
            parts.append(f".{part}" if parts else part)
            node = node.get(part) if isinstance(node, dict) else None
    return "".join(parts)


@transaction.atomic
def config_apply(config: ConfigFile) -> list[str]:
    """Create or update everything in the file; return one line per change."""
    changes: list[str] = []
    known = {entry.name for entry in config.deployments} | set(
        Deployment.objects.values_list("name", flat=True)
    )
    for model in config.models:
        if model.deployment not in known:
            raise ConfigError(
                f"model {model.id!r} names an unknown deployment {model.deployment!r}"
            )

    for entry in config.deployments:
        _, created = Deployment.objects.update_or_create(
            name=entry.name,
            defaults={
                "kind": Deployment.Kind.UPSTREAM if entry.upstreams else Deployment.Kind.SCRIPTED,
                "upstreams": entry.upstreams,
                "upstream_model": entry.upstream_model,
                "api_key_env": entry.api_key_env,
                "stream_default": entry.stream,
                "scripted_delay_ms": entry.scripted_delay_ms,
                "optimizer_mode": entry.optimizer,
                "connect_timeout_s": entry.timeouts.connect,
                "first_byte_timeout_s": entry.timeouts.first_byte,
                "chunk_timeout_s": entry.timeouts.between_chunks,
                "total_timeout_s": entry.timeouts.total,
                "extra_fields": entry.extra_fields,
                "usage_count": entry.usage_count,
                "chat_template": entry.chat_template,
            },
        )
        changes.append(f"{'created' if created else 'updated'} deployment {entry.name}")
    for model in config.models:
        _, created = CatalogModel.objects.update_or_create(
            id=model.id,
            defaults={
                "deployment": Deployment.objects.get(name=model.deployment),
                "context_window": model.context_window,
                "vision": model.vision,
                "surfaces": model.surfaces_value,
                "deployed": model.deployed,
                "price_input": model.prices.input,
                "price_cached_input": model.prices.cached_input,
                "price_output": model.prices.output,
            },
        )
        changes.append(f"{'created' if created else 'updated'} model {model.id}")
    catalog = set(CatalogModel.objects.values_list("id", flat=True))
    for key_entry in config.keys:
        unknown = [name for name in key_entry.models if name not in catalog]
        if unknown:
            raise ConfigError(
                f"key {key_entry.prefix!r} names unknown models: {', '.join(unknown)}"
            )
        try:
            key = key_by_prefix(key_entry.prefix)
        except KeyOperationError as exc:
            raise ConfigError(f"key {key_entry.prefix!r}: {exc}") from None
        if key_policy_set(key_id=key.pk, policy=key_entry.policy(), actor="manage.py applyconfig"):
            changes.append(f"updated key {key.prefix}")
    for organization in config.organizations:
        _, created = Organization.objects.update_or_create(
            name=organization.name,
            defaults={
                "retention": organization.retention,
                "retention_days": organization.retention_days,
                "optimize_default": organization.optimize_default,
                "finish_chunk_delta": organization.finish_chunk_delta,
                **organization.spend_limits(),
            },
        )
        changes.append(f"{'created' if created else 'updated'} organization {organization.name}")
    return changes
