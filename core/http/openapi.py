"""What /v1/openapi.json says that ninja cannot infer: error envelopes, streams, raw bodies.

Operations that read their body themselves (chat completions) or answer with a stream describe
them in ninja's `openapi_extra`, naming a schema with `SchemaRef(SomeType)`. The API's document
(`add_components`) turns each into a `$ref` and puts the type's JSON schema, and the schemas it
uses, in `components/schemas` — the same place ninja puts the `response=` schemas — so a schema
is still declared once, as a pydantic type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ninja.schema import NinjaGenerateJsonSchema
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from core.errors import Envelope

REF_TEMPLATE = "#/components/schemas/{model}"


class ErrorBody(BaseModel):
    message: str = Field(description="What went wrong, for a person to read.")
    type: str = Field(
        description="`invalid_request_error`, `authentication_error`, `server_error` or "
        "`upstream_error`."
    )
    param: str | None = Field(description="The field or header to blame, when one is.")
    code: str = Field(description="A machine-readable code, such as `invalid_parameter`.")


class ErrorEnvelope(BaseModel):
    """Every error on the OpenAI-compatible routes (PRODUCT.md decision 3)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "message": "`messages` is required.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "invalid_parameter",
                    }
                }
            ]
        }
    )
    error: ErrorBody


class FlatErrorEnvelope(BaseModel):
    """Arkor's flat envelope, on the replay route."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error": "Run chatcmpl-… is gone.", "code": "run_gone"}]}
    )
    error: str = Field(description="What went wrong, for a person to read.")
    code: str = Field(description="A machine-readable code, such as `run_gone`.")


class AnthropicErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(
        description="Follows from the status: `invalid_request_error` (400), "
        "`authentication_error` (401), `billing_error` (402), `permission_error` (403), "
        "`not_found_error` (404), `request_too_large` (413), `rate_limit_error` (429), "
        "`api_error` (500, 502), `timeout_error` (504), `overloaded_error` (503, 529)."
    )
    message: str = Field(description="What went wrong, for a person to read.")


class AnthropicErrorEnvelope(BaseModel):
    """Every error on the Messages route: Anthropic's envelope, without a `code`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "`max_tokens` is required.",
                    },
                }
            ]
        },
    )
    type: Literal["error"]
    error: AnthropicErrorBody


_ENVELOPES: dict[Envelope, type[BaseModel]] = {
    Envelope.OPENAI: ErrorEnvelope,
    Envelope.FLAT: FlatErrorEnvelope,
    Envelope.ANTHROPIC: AnthropicErrorEnvelope,
}


def error_responses(*statuses: int, style: Envelope = Envelope.OPENAI) -> dict[int, type]:
    """A `response=` entry for each status, answered in the route's error envelope."""
    return dict.fromkeys(statuses, _ENVELOPES[style])


@dataclass(frozen=True)
class SchemaRef:
    """A pydantic type (model, TypedDict, …) named in `openapi_extra`: becomes a `$ref`."""

    type: Any


def json_content(schema: Any = None, *, examples: dict[str, Any] | None = None) -> dict[str, Any]:
    """An `application/json` content entry of a request body or response (without a schema,
    it adds examples to the one ninja declares)."""
    content: dict[str, Any] = {} if schema is None else {"schema": schema}
    if examples:
        content["examples"] = examples
    return {"application/json": content}


def json_text(schema: Any) -> dict[str, Any]:
    """A string holding JSON that `schema` describes: an event's `data`."""
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def event_stream_content(
    fields: dict[str, Any], *, required: list[str], description: str, example: str
) -> dict[str, Any]:
    """A `text/event-stream` content entry whose events have `fields` (`data`, `id`, …).

    OpenAPI 3.1 has no word for a stream's items; as OpenAPI 3.2 reads `schema` when there is
    no `itemSchema`, it describes one event: an object of its fields, `data` being text.
    """
    event = {"type": "object", "description": description, "properties": fields}
    return {"text/event-stream": {"schema": {**event, "required": required}, "example": example}}


def add_components(document: dict[str, Any]) -> dict[str, Any]:
    """The document with each `SchemaRef` a `$ref`, and the schemas they name in components."""
    named: dict[str, Any] = {}

    def resolve(node: Any) -> Any:
        if isinstance(node, SchemaRef):
            name = node.type.__name__
            named[name] = node.type
            return {"$ref": REF_TEMPLATE.format(model=name)}
        if isinstance(node, dict):
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(value) for value in node]
        return node

    resolved: dict[str, Any] = resolve(document)
    schemas = resolved.setdefault("components", {}).setdefault("schemas", {})
    for name, declared in named.items():
        schema = TypeAdapter(declared).json_schema(
            ref_template=REF_TEMPLATE, schema_generator=NinjaGenerateJsonSchema
        )
        for defined, definition in [*schema.pop("$defs", {}).items(), (name, schema)]:
            if schemas.setdefault(defined, definition) != definition:
                raise ValueError(f"Two schemas are named {defined}: give one another name.")
    return resolved
