"""The run store: one row per chat completion request, and every chunk sent for it."""

from __future__ import annotations

from typing import Any

from django.db import models


class Run(models.Model):
    """One chat completion request, from acceptance to its last byte, refused ones included."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        REFUSED = "refused"  # answered with a 4xx before generation
        FAILED = "failed"  # an error on Mortar's or the model's side
        STOPPED = "stopped"
        CANCELLED = "cancelled"  # the client went away mid-generation
        # Its worker died mid-generation (its lease expired): closed with what was stored.
        INTERRUPTED = "interrupted"

    class UsageSource(models.TextChoices):
        ESTIMATE = "estimate"
        UPSTREAM = "upstream"
        # Counted by the model server when asked, after a reply that reported no usage.
        UPSTREAM_COUNT = "upstream_count"

    # The run id is the reply's id, so a client finds its run from its reply: chatcmpl- + 24 hex
    # for a chat completion, msg_ + 24 hex for a Message (`core.ids`). Django's key; in Postgres
    # the table is partitioned by day of `accepted_at` and its key is (id, accepted_at), which a
    # partitioned table's key must include (docs/decisions/run-store-partitions.md).
    id = models.CharField(max_length=40, primary_key=True)
    # No index of its own: the indexes below that lead with it serve the foreign key and every
    # filter by organization (migration 0019).
    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    # Indexed with `accepted_at` below (`run_key_accepted`), which also serves the foreign key.
    api_key = models.ForeignKey(
        "accounts.ApiKey",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="runs",
        db_index=False,
    )
    request_id = models.CharField(max_length=128, default="")
    end_user = models.CharField(max_length=256, default="", blank=True)
    session = models.CharField(max_length=128, default="", blank=True)
    model = models.CharField(max_length=200, default="", blank=True)
    deployment = models.CharField(max_length=100, default="", blank=True)
    stream = models.BooleanField(null=True)

    # Indexed only where it is not "completed" (`run_not_completed` below).
    status = models.CharField(max_length=20, choices=Status.choices)
    # The lease (`WorkerLease.id`) of the worker process that serves the run; blank when that
    # process held none when it accepted the run (then only age closes it if it is left open).
    worker = models.CharField(max_length=32, default="", blank=True)
    http_status = models.PositiveSmallIntegerField(null=True)
    error_code = models.CharField(max_length=64, default="", blank=True)
    error_message = models.TextField(default="", blank=True)

    # The body exactly as received (bytes: it may not even be valid UTF-8).
    request_body = models.BinaryField(null=True)
    request_bytes = models.PositiveIntegerField(default=0)
    request_truncated = models.BooleanField(default=False)

    accepted_at = models.DateTimeField(db_index=True)
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    finish_reason = models.CharField(max_length=32, default="", blank=True)
    max_tokens = models.PositiveIntegerField(null=True)
    prompt_tokens = models.PositiveIntegerField(null=True)
    completion_tokens = models.PositiveIntegerField(null=True)
    total_tokens = models.PositiveIntegerField(null=True)
    usage_source = models.CharField(
        max_length=16, choices=UsageSource.choices, default="", blank=True
    )
    chunk_count = models.PositiveIntegerField(default=0)
    # The usage object exactly as returned to the client (upstream details included).
    usage = models.JSONField(null=True, blank=True)

    cached_tokens = models.PositiveIntegerField(null=True)
    cost = models.DecimalField(max_digits=18, decimal_places=9, null=True)
    # What the budget ledger (the billing app) held before generation and charged after, in
    # USD to the micro-dollar; null for a run no budget applied to (or refused before its hold).
    held_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True)
    charged_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True)
    # A hold drawn from its worker's slice of the budgets (`billing.services.slices`): the
    # slice's id, and the part of `held_usd` that paid for the prompt. The row's insert moves
    # the draw from the slice to the run's own hold, in Postgres (billing's triggers on this
    # table).
    budget_slice = models.CharField(max_length=64, null=True)
    held_prompt_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True)

    # Reports of the prompt optimizer and the named tool selector, as sent in their headers.
    optimizer_report = models.JSONField(null=True, blank=True)
    tool_selector_report = models.JSONField(null=True, blank=True)

    # In-flight dedupe: `leader` ran the generation, `shared` reused the leader's result.
    dedupe_role = models.CharField(max_length=8, default="", blank=True)
    dedupe_leader = models.CharField(max_length=40, default="", blank=True)

    # Forwarded runs: the replica that served, whether it was the session's own replica, and
    # the body exactly as sent to it.
    replica = models.CharField(max_length=500, default="", blank=True)
    session_kept = models.BooleanField(null=True)
    upstream_request = models.BinaryField(null=True)

    # A re-run: the id of the run whose stored request this one sent again, null
    # for a request a client sent. A plain id, no foreign key: no index or constraint to keep
    # on the hot path's inserts, and the original may be purged before its re-runs.
    rerun_of = models.CharField(max_length=40, null=True, blank=True)

    # What the dashboard's free-text search reads (`telemetry.store.search_text`): the text of the
    # request's messages, taken from its body by the run writer when it stores the run, and the
    # reply's text, handed over by the relay when the run closes. Blank under `metadata`
    # retention. Postgres indexes both with a GIN index over their tsvector (migration 0015).
    prompt_text = models.TextField(default="", blank=True)
    reply_text = models.TextField(default="", blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["organization", "-accepted_at"], name="run_org_accepted"),
            models.Index(fields=["organization", "session"], name="run_org_session"),
            # The dashboard's runs list filters by end user and by organization + model, and
            # pages by (accepted_at, id): bench/runs_list_bench.py, 1M runs.
            models.Index(fields=["end_user", "-accepted_at", "-id"], name="run_end_user_accepted"),
            models.Index(
                fields=["organization", "model", "-accepted_at", "-id"],
                name="run_org_model_accepted",
            ),
            # The Spend page's errors by code: only the runs that are errors (the rollups'
            # definition, `telemetry.services.rollups.IS_ERROR`), so a month of them is read
            # without the month's runs. Status already has an index: this adds no write to a
            # run that is not an error.
            models.Index(
                fields=["-accepted_at"],
                name="run_error_accepted",
                condition=models.Q(status__in=["failed", "refused", "interrupted"])
                | models.Q(http_status__gte=400),
            ),
            # The Keys page's "last used": the newest run per key is one index probe, so no
            # request writes to its key's row. It replaces the foreign key's own index (same
            # leading column), so storing a run costs no more index work than before.
            models.Index(fields=["api_key", "-accepted_at"], name="run_key_accepted"),
            # The sweep's and the Live page's runs in progress, and the runs list's rarer
            # statuses. Partial: a run stored whole (most non-streaming runs: the writer merges
            # a run opened and closed in one batch) adds no entry, and a run's closing update
            # adds none either. It replaced an index of every run's status (migration 0019).
            models.Index(
                fields=["status", "-accepted_at", "-id"],
                name="run_not_completed",
                condition=~models.Q(status="completed"),
            ),
        ]

    def __str__(self) -> str:
        return self.id


class RunAcceptedAtField(models.DateTimeField):  # type: ignore[type-arg]
    """A chunk's copy of its run's `accepted_at`: the chunk table's partition key in Postgres
    (`telemetry.store.partitions`), so a run's chunks are stored in its run's day.

    The run writer fills it from the run it stores; a chunk saved through the ORM without it
    takes its run's (one query when the run is not loaded).
    """

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = getattr(model_instance, self.attname)
        if value is None and add:
            value = model_instance.run.accepted_at  # type: ignore[attr-defined]
            setattr(model_instance, self.attname, value)
        return value


class RunChunkQuerySet(models.QuerySet["RunChunk"]):
    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[RunChunk]:
        """As Django's, the chunks' `run_accepted_at` taken from their runs where not given
        (part of the key: a chunk without it would count as one with no key)."""
        objs = list(objs)
        missing = {chunk.run_id for chunk in objs if chunk.run_accepted_at is None}
        if missing:
            accepted = dict(Run.objects.filter(pk__in=missing).values_list("pk", "accepted_at"))
            for chunk in objs:
                if chunk.run_accepted_at is None:
                    chunk.run_accepted_at = accepted.get(chunk.run_id)
        return super().bulk_create(objs, *args, **kwargs)


class RunChunk(models.Model):
    """One piece of a response exactly as sent: an SSE event's bytes, or a whole JSON body."""

    # Keyed by run, its acceptance time and sequence: no surrogate id (a bigint and its index
    # per chunk, migration 0022), and Postgres's key of a partitioned table must hold the
    # partition key. Nothing refers to a chunk.
    pk = models.CompositePrimaryKey("run_id", "run_accepted_at", "seq")
    # No index of its own: the primary key leads with it. No foreign key constraint in the
    # database (migration 0019): its check, at each commit, looked every chunk's run up and
    # locked it, a third of what storing a stream cost Postgres (and a partitioned run table
    # cannot be referred to by `id` alone). A statement-level trigger refuses chunks of a run
    # that is not stored instead (the run writer's SQLite path checks the same), and Django
    # deletes a run's chunks with it (the ORM carries `on_delete` out itself).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="chunks", db_index=False, db_constraint=False
    )
    # The run's `accepted_at`; read a run's chunks with it (`run_accepted_at=run.accepted_at`)
    # and Postgres reads one partition.
    run_accepted_at = RunAcceptedAtField()
    seq = models.PositiveIntegerField()
    # Microseconds since the run was accepted.
    offset_us = models.BigIntegerField()
    data = models.BinaryField()

    objects = RunChunkQuerySet.as_manager()

    class Meta:
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq}"


class UsageRollup(models.Model):
    """Usage summed per hour and who/what, so dashboards never scan runs."""

    hour = models.DateTimeField()
    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="rollups"
    )
    # The key's id, 0 when the run has none; a plain number so the unique key has no NULLs.
    api_key_id = models.BigIntegerField(default=0)
    end_user = models.CharField(max_length=256, default="", blank=True)
    model = models.CharField(max_length=200, default="", blank=True)
    deployment = models.CharField(max_length=100, default="", blank=True)

    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=9, default=0)
    latency_ms_sum = models.BigIntegerField(default=0)
    ttft_ms_sum = models.BigIntegerField(default=0)
    ttft_count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "organization", "api_key_id", "end_user", "model", "deployment"],
                name="usage_rollup_unique",
            )
        ]
        indexes = [
            models.Index(fields=["organization", "hour"], name="rollup_org_hour"),
            # The Spend page's cache savings of the end users it lists (their breakdowns keep
            # no model to price them by).
            models.Index(fields=["end_user", "hour"], name="rollup_end_user_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.organization_id} {self.hour:%Y-%m-%d %H}:00 {self.model}"


class UsageBreakdown(models.Model):
    """The rollups summed again over a coarser grain — an hour or a day, and one breakdown's
    columns only — so a month's Spend page reads thousands of rows, not one per run.

    Derived from `UsageRollup` only (telemetry/services/rollups.py recomputes an hour's
    breakdowns with its rows, a day's after its hours), so the two always sum alike. A grain
    keeps the columns its breakdown needs and leaves the others at their defaults; `model` is
    kept where the breakdown's cache savings need it (priced per model at read time).
    """

    class Span(models.TextChoices):
        HOUR = "hour"
        DAY = "day"

    span = models.CharField(max_length=4, choices=Span.choices)
    start = models.DateTimeField()
    grain = models.CharField(max_length=16)  # telemetry.services.breakdowns.BREAKDOWN_GRAINS
    # A plain number, 0 for the sum over every organization (the `end_user_all` grain); no
    # foreign key, so the unique key has no NULLs.
    organization_id = models.BigIntegerField(default=0)
    api_key_id = models.BigIntegerField(default=0)
    end_user = models.CharField(max_length=256, default="", blank=True)
    model = models.CharField(max_length=200, default="", blank=True)
    deployment = models.CharField(max_length=100, default="", blank=True)

    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=9, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "span",
                    "grain",
                    "start",
                    "organization_id",
                    "api_key_id",
                    "end_user",
                    "model",
                    "deployment",
                ],
                name="usage_breakdown_unique",
            )
        ]
        indexes = [
            models.Index(
                fields=["span", "grain", "organization_id", "start"],
                name="usage_breakdown_org_start",
            ),
            # The Spend page's chart lines: the top end users' own rows.
            models.Index(fields=["grain", "end_user", "start"], name="usage_breakdown_end_user"),
        ]

    def __str__(self) -> str:
        return f"{self.span} {self.grain} {self.start:%Y-%m-%d %H}:00 #{self.organization_id}"


class Image(models.Model):
    """An image a request carried to a vision model, stored once per organization by content.

    Runs reference it (`RunImage`) and their stored bodies name it (`mortar-image:sha256:…` in
    place of the data URL), so the same screenshot sent in 50 turns of an agent loop is one row.
    Keyed by organization too: an image is only ever reached through the runs of the
    organization that sent it, even when another sent the same bytes.
    """

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="images"
    )
    sha256 = models.CharField(max_length=64)
    media_type = models.CharField(max_length=16)  # image/png, image/jpeg, image/webp, image/gif
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    size = models.PositiveIntegerField()  # bytes
    data = models.BinaryField()
    first_seen_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "sha256"], name="image_org_sha256")
        ]

    def __str__(self) -> str:
        return f"{self.media_type} {self.sha256[:12]}"


class RunImage(models.Model):
    """One image of a run's request, in the order the request carried them."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the unique (run, position) constraint serves lookups by run. No
    # foreign key constraint in the database: in Postgres the run table is partitioned by
    # `accepted_at`, and its key is (id, accepted_at), so `id` alone cannot be referred to.
    # Django deletes a run's images with it; retention deletes those of a day it drops.
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="images",
        db_index=False,
        db_constraint=False,
    )
    position = models.PositiveIntegerField()
    # DO_NOTHING: an image is deleted only once no run uses it (the retention purge), in one
    # DELETE … WHERE NOT EXISTS, so a link written meanwhile is never deleted with it; the
    # database's foreign key refuses a link to an image deleted under it.
    image = models.ForeignKey(Image, on_delete=models.DO_NOTHING, related_name="uses")
    # Where the request carried it: `messages[0].content[1]`.
    param = models.CharField(max_length=64, default="", blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="run_image_position_unique"),
        ]
        ordering = ["run", "position"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.position}"


class WorkerLease(models.Model):
    """A worker process's lease: renewed every few seconds while it lives.

    A run is owned by the lease of the worker that accepted it (`Run.worker`). When a lease
    expires its worker is taken for dead, and its runs still in progress are closed as
    `interrupted` (`telemetry.services.interruptions`). Times come from the database's clock,
    so workers on hosts whose clocks disagree still agree on what has expired.
    """

    id = models.CharField(max_length=32, primary_key=True)
    host = models.CharField(max_length=255, default="", blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    renewed_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.id} ({self.host}:{self.pid})"
