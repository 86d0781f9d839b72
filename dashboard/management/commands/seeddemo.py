"""Fill the configured database with a demo for the dashboard: a staff account, three
organizations with keys, a slow scripted model for live demos, and a day of synthetic runs.

Meant for a throwaway database (`make screenshots` runs it on a fresh SQLite file under
var/screenshots/); it refuses to run twice on the same database.
"""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.models import ApiKey, Organization
from accounts.services import key_create
from billing.costs import Prices, usage_cost
from gateway.models import CatalogModel, Deployment
from telemetry.models import Run
from telemetry.services.rollups import usage_rollups_refresh

# Names as long as real ones get (a fine-tune's id, a division's name, hashed end users), so
# the screenshots show the pages hold them (a runs list that overflows 1440 px shows it).
ORGANIZATIONS = ("acme", "globex", "initech", "Initech Research & Development, EMEA Support")
MODELS = (
    # id, input, cached input, output price per million tokens
    ("Qwen/Qwen2.5-7B-Instruct", Decimal("0.20"), Decimal("0.05"), Decimal("0.60")),
    ("qwen-upstream", Decimal("0.30"), Decimal("0.075"), Decimal("0.90")),
    ("llama-3.1-8b", Decimal("0.18"), Decimal("0.045"), Decimal("0.18")),
    (
        "initech-research/Qwen2.5-72B-Instruct-support-tickets-GPTQ-Int4-2026-11-30-v17",
        Decimal("1.25"),
        Decimal("0.3125"),
        Decimal("10"),
    ),
)
END_USERS = ["ana", "bo", "chen", "dara", "", "user-sha256-4f1c9a7e2b8d6c3f0a5e9d1b7c4f2a8e6d3b"]
REPLICAS = ("http://10.0.0.11:8000/v1", "http://10.0.0.12:8000/v1")


class Command(BaseCommand):
    help = "Seed a throwaway database with demo data for the dashboard."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--password", default="demo-operator-password")
        parser.add_argument("--runs", type=int, default=1500)

    def handle(self, *args: object, password: str, runs: int, **options: object) -> None:
        if Organization.objects.filter(name=ORGANIZATIONS[0]).exists():
            raise CommandError("The demo is already seeded here.")
        User.objects.create_user("operator", password=password, is_staff=True, is_superuser=True)
        slow, _ = Deployment.objects.get_or_create(
            name="scripted-slow", defaults={"scripted_delay_ms": 250}
        )
        CatalogModel.objects.get_or_create(id="demo-slow", defaults={"deployment": slow})
        Deployment.objects.get_or_create(
            name="vllm-a", defaults={"kind": Deployment.Kind.UPSTREAM, "upstreams": list(REPLICAS)}
        )
        for model_id, price_in, price_cached, price_out in MODELS:
            CatalogModel.objects.update_or_create(
                id=model_id,
                defaults={
                    "price_input": price_in,
                    "price_cached_input": price_cached,
                    "price_output": price_out,
                },
            )
        keys = []
        for name in ORGANIZATIONS:
            # A monthly budget on each, so the budgets page has rows to show.
            organization = Organization.objects.create(
                name=name, budget_usd=Decimal("250"), budget_period="month"
            )
            for key_name in ("production", "ci"):
                keys.append(key_create(organization=organization, name=key_name).key)
        self._history(keys, runs)
        usage_rollups_refresh(since=timezone.now() - timedelta(hours=26))
        self.stdout.write(f"Seeded {runs} runs; sign in as operator / {password}")

    def _history(self, keys: list[ApiKey], count: int) -> None:
        chance = random.Random(6)
        now = timezone.now()
        rows = []
        for i in range(count):
            key = chance.choice(keys)
            model, price_in, price_cached, price_out = chance.choice(MODELS)
            forwarded = model != "Qwen/Qwen2.5-7B-Instruct"
            accepted = now - timedelta(seconds=chance.uniform(60, 24 * 3600))
            session = f"conv-{chance.randrange(40)}"
            prompt = chance.randrange(200, 6000)
            cached = (prompt * chance.randrange(30, 90) // 100) if forwarded else 0
            completion = chance.randrange(20, 600)
            ttft = timedelta(milliseconds=chance.lognormvariate(5.0, 0.5))
            latency = ttft + timedelta(milliseconds=completion * chance.uniform(8, 20))
            failed = chance.random() < 0.03
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            cost = usage_cost(usage, Prices(price_in, price_cached, price_out))
            rows.append(
                Run(
                    id=f"chatcmpl-{chance.getrandbits(96):024x}",
                    organization_id=key.organization_id,
                    api_key=key,
                    request_id=f"req_demo_{i}",
                    end_user=chance.choice(END_USERS),
                    session=session,
                    model=model,
                    deployment="vllm-a" if forwarded else "scripted",
                    stream=True,
                    status=Run.Status.FAILED if failed else Run.Status.COMPLETED,
                    http_status=502 if failed else 200,
                    error_code="upstream_error" if failed else "",
                    accepted_at=accepted,
                    first_token_at=None if failed else accepted + ttft,
                    finished_at=accepted + (ttft if failed else latency),
                    finish_reason="" if failed else chance.choice(["stop"] * 5 + ["length"]),
                    max_tokens=1024,
                    prompt_tokens=None if failed else prompt,
                    completion_tokens=None if failed else completion,
                    total_tokens=None if failed else prompt + completion,
                    cached_tokens=None if failed else cached,
                    usage_source="" if failed else ("upstream" if forwarded else "estimate"),
                    cost=None if failed else cost,
                    replica=REPLICAS[int(session[5:]) % 2] if forwarded else "",
                    session_kept=(chance.random() > 0.08) if forwarded else None,
                )
            )
        Run.objects.bulk_create(rows, batch_size=500)
