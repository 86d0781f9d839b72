"""What the API's OpenAPI document says that ninja cannot infer: error envelopes, streams, raw
bodies.

Operations that read their body themselves or answer with a stream describe them in ninja's
`openapi_extra`, naming a schema with `SchemaRef(SomeType)`. The API's document
(`add_components`) turns each into a `$ref` and puts the type's JSON schema, and the schemas it
uses, in `components/schemas` — the same place ninja puts the `response=` schemas — so a schema
is still declared once, as a pydantic type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ninja.schema import NinjaGenerateJsonSchema
from pydantic import TypeAdapter

from core.http.envelopes import MORTAR_ENVELOPE, Envelope

REF_TEMPLATE = "#/components/schemas/{model}"


def error_responses(*statuses: int, envelope: Envelope = MORTAR_ENVELOPE) -> dict[int, type]:
    """A `response=` entry for each status, answered in the route's error envelope."""
    return dict.fromkeys(statuses, envelope.schema)


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
