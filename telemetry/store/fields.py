"""A run's fields as they cross from the request path to the run writer: one typed record.

The gateway writes a run's fields from what its pipeline decided (when the run opens, or when it
closes for a run refused before it opened), then its routing and its outcome; the writer
stores them as columns of `telemetry.models.Run`. `RunFields` names every field that may
cross, with its type, so a misspelt or mistyped field fails in the type checker (mypy checks
every `**fields` against it) and in `tests/telemetry/store/test_run_fields.py` (every name is a
column of the table) — never in the writer's thread, where a bad row would be logged and lost.

A TypedDict rather than a dataclass: the record is built a field at a time on the hot path and
handed to the writer as the mapping it writes, so it costs nothing beyond the dict it always was.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple, TypedDict


class RunFields(TypedDict, total=False):
    """Columns of a run (`telemetry.models.Run`, by attribute name), any subset of them."""

    # Who and where (known on acceptance and while planning).
    id: str
    accepted_at: datetime
    organization_id: int
    api_key_id: int | None
    request_id: str
    session: str
    end_user: str
    model: str
    deployment: str
    worker: str
    # What was received and planned.
    request_body: bytes | None
    request_bytes: int
    request_truncated: bool
    stream: bool | None
    max_tokens: int | None
    prompt_tokens: int | None
    optimizer_report: dict[str, Any] | None
    tool_selector_report: dict[str, Any] | None
    dedupe_role: str
    dedupe_leader: str
    # Where it went.
    upstream_request: bytes | None
    replica: str
    session_kept: bool | None
    # A re-run's origin (`gateway.reruns`).
    rerun_of: str | None
    # How it ended.
    status: str
    http_status: int | None
    error_code: str
    error_message: str
    first_token_at: datetime | None
    finished_at: datetime | None
    finish_reason: str
    completion_tokens: int | None
    total_tokens: int | None
    cached_tokens: int | None
    usage: dict[str, Any] | None
    usage_source: str
    cost: Decimal | None
    held_usd: Decimal | None
    charged_usd: Decimal | None
    budget_slice: str | None
    held_prompt_usd: Decimal | None
    chunk_count: int
    # What the dashboard's search reads (`telemetry.store.search_text`).
    prompt_text: str
    reply_text: str


class ImageRecord(NamedTuple):
    """An image a run's request carried, checked, as the writer stores it
    (`telemetry.store.images`).

    Hashed and stored on the writer's thread, never on the request's event loop.
    """

    media_type: str  # image/png, image/jpeg, image/webp or image/gif
    data: bytes  # the decoded bytes; the data URL is their canonical base64
    width: int
    height: int
    param: str  # where the request carried it: `messages[0].content[1]`
