"""The live events of `GET /v1/telemetry/stream`, declared for /v1/openapi.json.

One schema per event type, as `telemetry.events` describes them: every event has `type`,
`runId`, `time` and `session`; the rest depends on the type. Each event arrives as
`id: <event id>`, `event: <type>` and `data: <the event as JSON>`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

EVENT_STREAM_EXAMPLE = (
    ": connected\n\n"
    "id: 1767225600000-0\nevent: request.accepted\n"
    'data: {"type":"request.accepted","runId":"chatcmpl-9b2f4d6e8a0c4b1d3f5e7a9c",'
    '"time":"2026-01-01T00:00:00.000+00:00","session":"sess_0c2e4a6b8d0f1e3a5c7b9d1f",'
    '"model":"Qwen/Qwen2.5-7B-Instruct","deployment":"scripted","endUser":"","stream":true,"keyId":7}\n\n'
    ": keep-alive\n\n"
)


class Event(BaseModel):
    # Fields may be added to an event; a reader ignores what it does not know.
    model_config = ConfigDict(extra="allow")
    runId: str = Field(description="The run (and completion) the event is about.")
    time: str = Field(description="When it happened, ISO 8601 with milliseconds.")
    session: str = Field(description="The run's session, or an empty string.")


class UsageSourced(Event):
    usage: dict[str, Any] | None = Field(description="The usage the run was billed on.")
    usageSource: str = Field(
        description=(
            "Whose count the usage is: the model server's as it reported it (`upstream`) or as"
            " it counted it when asked after the reply (`upstream_count`), or Mortar's"
            " estimate (`estimate`)."
        )
    )
    latencyMs: float = Field(description="From acceptance to the end, in milliseconds.")


class RequestAccepted(Event):
    type: Literal["request.accepted"]
    model: str
    deployment: str
    endUser: str
    stream: bool | None
    keyId: int | None = Field(
        default=None, description="The id of the API key the request was made with."
    )


class RequestRouted(Event):
    type: Literal["request.routed"]
    deployment: str
    replica: str | None
    sessionKept: bool | None


class OptimizerReport(Event):
    type: Literal["optimizer.report"]
    report: dict[str, Any] = Field(description="What the prompt optimizer did, or would do.")


class FirstToken(Event):
    type: Literal["generation.first_token"]
    ttftMs: float = Field(description="Time to the first token, in milliseconds.")


class GenerationFinished(UsageSourced):
    type: Literal["generation.finished"]
    finishReason: str


class GenerationStopped(UsageSourced):
    type: Literal["generation.stopped"]
    reason: str = Field(description="`stopped`, or `client_disconnected`.")


class GenerationFailed(Event):
    type: Literal["generation.failed"]
    httpStatus: int | None
    code: str
    message: str


class CacheEvent(Event):
    type: Literal["cache"]
    promptTokens: int | None
    cachedTokens: int
    sessionKept: bool | None
    replica: str | None
    usageSource: str


class CostEvent(Event):
    type: Literal["cost"]
    cost: str | None = Field(description="The run's cost, as a decimal string.")
    promptTokens: int | None
    cachedTokens: int
    completionTokens: int | None
    usageSource: str


class TelemetryEvent(
    RootModel[
        Annotated[
            RequestAccepted
            | RequestRouted
            | OptimizerReport
            | FirstToken
            | GenerationFinished
            | GenerationStopped
            | GenerationFailed
            | CacheEvent
            | CostEvent,
            Field(discriminator="type"),
        ]
    ]
):
    """One live event: its `type` says which fields it has."""
