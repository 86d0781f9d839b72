"""What the pipeline decides about a request, stage by stage, each stage an immutable value.

    Accepted → Resolved → Planned → Limited → Held → Admitted → Routed

Each stage holds the one before it (`prior`) and adds what its step decided, so a step takes
the stage it needs, typed, and never asks whether an earlier decision was made. A request's
`Run` (`run.py`) keeps the last stage it reached: its columns (`RunFields`) and its response's
`X-Mortar-*` headers are what the stages reached say, for a refusal half-way as for a reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from accounts.models import ApiKey, Organization
from billing.errors import RateLimitExceeded
from billing.services.holds import HeldBudget
from billing.services.ratelimits import RateLimitCheck
from gateway.contract.chat import ChatRequest
from gateway.contract.headers import MortarHeaders
from gateway.contract.images import CheckedImage
from gateway.contract.surface import Surface
from gateway.coordination.dedupe import DedupeRequest
from gateway.models import CatalogModel, Deployment
from gateway.optimizer import OptimizerReport
from gateway.tokens import TokenCounter
from gateway.tool_selector import ToolSelection
from telemetry.store.fields import ImageRecord, RunFields


@dataclass(frozen=True, slots=True)
class Accepted:
    """Who sent what: the run's id, its key and organization, and the request as received (a
    body over the limit only in part) — stored with the run whatever happens next."""

    run_id: str  # the surface's prefix and 24 hex: the completion's or message's id too
    surface: Surface
    key: ApiKey
    organization: Organization
    accepted_at: datetime
    started: float  # `time.perf_counter()` at acceptance: chunks' offsets count from it
    created: int
    route: str  # the path it came in on: the label of its metrics
    request_id: str
    body: bytes
    size: int  # every byte the client sent
    worker: str  # the lease of the worker serving it: closed as interrupted if that expires
    rerun_of: str | None = None  # the run it sends again (`gateway.reruns`)

    @property
    def too_large(self) -> bool:
        return self.size > settings.MORTAR_MAX_BODY_BYTES

    @property
    def keeps_content(self) -> bool:
        """Whether its organization's retention keeps prompt and reply text."""
        return self.organization.retention == Organization.Retention.FULL

    def add_fields(self, fields: RunFields) -> None:
        fields["id"] = self.run_id
        fields["accepted_at"] = self.accepted_at
        fields["organization_id"] = self.organization.id
        fields["worker"] = self.worker
        fields["api_key_id"] = self.key.id
        fields["request_id"] = self.request_id
        fields["request_body"] = self.body
        fields["request_bytes"] = self.size
        if self.too_large:
            fields["request_truncated"] = True
        if self.rerun_of is not None:
            fields["rerun_of"] = self.rerun_of

    def add_headers(self, headers: dict[str, str]) -> None:
        headers["X-Mortar-Request-Id"] = self.run_id
        headers["X-Mortar-Run-Id"] = self.run_id


@dataclass(frozen=True, slots=True)
class Resolved:
    """The request validated for its surface (Mortar's own headers too), its model (one the
    key may use) and deployment, its session and end user."""

    prior: Accepted
    chat: ChatRequest
    mortar_headers: MortarHeaders
    model: CatalogModel
    deployment: Deployment
    session: str
    end_user: str

    def add_fields(self, fields: RunFields) -> None:
        fields["model"] = self.model.id
        fields["deployment"] = self.deployment.name
        fields["session"] = self.session
        fields["end_user"] = self.end_user

    def add_headers(self, headers: dict[str, str]) -> None:
        headers["X-Mortar-Deployment"] = self.deployment.name
        headers["X-Mortar-Model"] = self.model.id
        headers["X-Mortar-Session"] = self.session


@dataclass(frozen=True, slots=True)
class Planned:
    """The prompt as it goes out: its images checked, its tools selected, optimized, counted;
    and whether the reply streams."""

    prior: Resolved
    images: tuple[CheckedImage, ...]
    tool_selection: ToolSelection | None
    optimizer_report: OptimizerReport
    counter: TokenCounter
    prompt_tokens: int
    stream: bool

    @property
    def resolved(self) -> Resolved:
        return self.prior

    def add_fields(self, fields: RunFields) -> None:
        if self.tool_selection is not None:
            fields["tool_selector_report"] = self.tool_selection.as_dict()
        fields["optimizer_report"] = self.optimizer_report.as_dict()
        fields["prompt_tokens"] = self.prompt_tokens

    def add_headers(self, headers: dict[str, str]) -> None:
        if self.tool_selection is not None:
            headers["X-Mortar-Tool-Selector"] = self.tool_selection.header()
        headers["X-Mortar-Optimizer"] = self.optimizer_report.header()

    def image_records(self) -> list[ImageRecord]:
        """The checked images of a vision request, as the run stores them."""
        return [
            ImageRecord(image.media_type, image.data, image.width, image.height, image.param)
            for image in self.images
        ]


@dataclass(frozen=True, slots=True)
class Limited:
    """The limits it runs under: the output cap that fits the context window, its dedupe
    request, and where its rate limits stand (`rate_limits.verdict.admitted` false: refused)."""

    prior: Planned
    max_tokens: int
    dedupe: DedupeRequest | None
    rate_limits: RateLimitCheck | None

    def refusal(self) -> RateLimitExceeded | None:
        """The 429 of a request a rate limit had no room for; None when admitted."""
        if self.rate_limits is None or self.rate_limits.verdict.admitted:
            return None
        return self.rate_limits.refusal()

    def add_fields(self, fields: RunFields) -> None:
        pass  # the cap is stored as the hold leaves it, when the run opens

    def add_headers(self, headers: dict[str, str]) -> None:
        if self.rate_limits is not None:
            headers.update(self.rate_limits.headers())


@dataclass(frozen=True, slots=True)
class Held:
    """Its hold on its budgets (None when no budget applies), and the output cap they pay."""

    prior: Limited
    budget: HeldBudget | None
    max_tokens: int

    @property
    def planned(self) -> Planned:
        return self.prior.prior

    def add_fields(self, fields: RunFields) -> None:
        budget = self.budget
        if budget is None:
            return
        fields["held_usd"] = budget.amount_usd
        if budget.draw is not None:
            # What it drew from the worker's slice: its opened row's insert makes it the run's
            # own hold (the billing app's triggers on the run table).
            fields["budget_slice"] = budget.draw.slice_id
            fields["held_prompt_usd"] = budget.draw.prompt_usd

    def add_headers(self, headers: dict[str, str]) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Admitted:
    """Cleared to be answered: by generating (alone, or as dedupe's `leader`), or with a
    leader's answer (`shared`, `answered_by` the leader's run)."""

    prior: Held
    dedupe_role: str | None = None
    answered_by: str | None = None

    @property
    def held(self) -> Held:
        return self.prior

    def add_fields(self, fields: RunFields) -> None:
        if self.dedupe_role is not None:
            fields["dedupe_role"] = self.dedupe_role
        if self.answered_by is not None:
            fields["dedupe_leader"] = self.answered_by

    def add_headers(self, headers: dict[str, str]) -> None:
        if self.dedupe_role is not None:
            headers["X-Mortar-Dedupe"] = self.dedupe_role
        if self.answered_by is not None:
            headers["X-Mortar-Request-Id"] = self.answered_by


@dataclass(frozen=True, slots=True)
class Routed:
    """Where it runs: the replica that answers (its URL for operators, its name for clients;
    empty for the scripted model) and whether that is its session's own."""

    prior: Admitted
    replica: str
    replica_name: str
    session_kept: bool | None

    def add_fields(self, fields: RunFields) -> None:
        fields["replica"] = self.replica
        fields["session_kept"] = self.session_kept

    def add_headers(self, headers: dict[str, str]) -> None:
        if self.replica_name:
            headers["X-Mortar-Upstream"] = self.replica_name


Stage = Accepted | Resolved | Planned | Limited | Held | Admitted | Routed
