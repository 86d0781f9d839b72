"""/v1/openapi.json declares every operation's input and output; /v1/docs shows it offline."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from mortar import __version__
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

ASSET = re.compile(r'(?:src|href)="([^"]+)"')
SETTINGS = re.compile(r'<script type="application/json" id="swagger-settings">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def document(mortar_server: ServerProcess) -> dict[str, Any]:
    response = httpx.get(f"{mortar_server.base_url}/v1/openapi.json", timeout=10)
    assert response.status_code == 200
    return orjson.loads(response.content)


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        details["operationId"]: details
        for methods in document["paths"].values()
        for details in methods.values()
    }


def test_the_document_names_the_release_it_describes(document: dict[str, Any]) -> None:
    assert document["info"]["title"] == "Mortar"
    assert document["info"]["version"] == __version__  # the release; the API's is its /v1/


def test_the_docs_page_uses_only_local_assets(mortar_server: ServerProcess) -> None:
    page = httpx.get(f"{mortar_server.base_url}/v1/docs", timeout=10)

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assets = ASSET.findall(page.text)
    assert {asset.rsplit("/", 1)[1] for asset in assets} >= {
        "swagger-ui.css",
        "swagger-ui-bundle.js",
        "swagger-ui-init.js",
    }
    assert all(asset.startswith("/static/ninja/") for asset in assets), assets
    assert "http://" not in page.text and "https://" not in page.text  # no CDN, no validator
    match = SETTINGS.search(page.text)
    assert match is not None
    settings = orjson.loads(match.group(1))
    assert (settings["url"], settings["validatorUrl"]) == ("/v1/openapi.json", None)


def test_the_docs_assets_are_served(mortar_server: ServerProcess) -> None:
    page = httpx.get(f"{mortar_server.base_url}/v1/docs", timeout=10)

    for asset in ASSET.findall(page.text):
        response = httpx.get(f"{mortar_server.base_url}{asset}", timeout=10)
        assert response.status_code == 200, asset
        assert len(response.content) > 1000, asset
        if asset.endswith(".js"):
            assert "javascript" in response.headers["content-type"]
        elif asset.endswith(".css"):
            assert response.headers["content-type"].startswith("text/css")


def assert_spend_control_answers(answers: dict[str, Any]) -> None:
    """402, 429 and 529 are declared, and the rate-limit headers with the 429 and the 200."""
    rate_limit_headers = {
        f"x-ratelimit-{part}-{kind}"
        for part in ("limit", "remaining", "reset")
        for kind in ("requests", "tokens")
    }
    assert "insufficient_quota" in answers["402"]["description"]
    assert {"Retry-After", *rate_limit_headers} <= set(answers["429"]["headers"])
    assert answers["429"]["headers"]["Retry-After"]["schema"]["minimum"] == 1
    assert rate_limit_headers <= set(answers["200"]["headers"])
    assert "overloaded" in answers["529"]["description"]


def test_chat_completions_declares_its_body_and_answers(document: dict[str, Any]) -> None:
    operation = operations(document)["create_chat_completion"]

    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    assert set(body["examples"]) == {"json", "stream", "tools", "tool_result"}
    request = document["components"]["schemas"]["ChatCompletionRequest"]
    assert request["required"] == ["messages"]
    assert {"messages", "tools", "tool_choice", "stream", "max_tokens", "temperature"} <= set(
        request["properties"]
    )
    answers = operation["responses"]
    assert set(answers) == {
        *("200", "400", "401", "402", "403", "404", "409", "413", "429", "502", "503", "504"),
        "529",
    }
    assert_spend_control_answers(answers)
    assert answers["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ChatCompletion"
    }
    stream = answers["200"]["content"]["text/event-stream"]["schema"]
    assert stream["properties"]["data"]["anyOf"][0]["contentSchema"]["anyOf"][0] == {
        "$ref": "#/components/schemas/ChatCompletionChunk"
    }
    for status in ("400", "401", "402", "403", "404", "413", "429", "502", "529"):
        assert answers[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorEnvelope"
        }


def test_messages_declares_its_body_and_answers_in_anthropics_envelope(
    document: dict[str, Any],
) -> None:
    operation = operations(document)["create_message"]

    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/MessagesRequest"}
    assert set(body["examples"]) == {"json", "stream", "tools", "tool_result"}
    request = document["components"]["schemas"]["MessagesRequest"]
    assert request["required"] == ["model", "max_tokens", "messages"]
    assert {"system", "tools", "tool_choice", "stop_sequences", "metadata", "thinking"} <= set(
        request["properties"]
    )
    answers = operation["responses"]
    assert set(answers) == {
        *("200", "400", "401", "402", "403", "404", "409", "413", "429", "502", "503", "504"),
        "529",
    }
    assert_spend_control_answers(answers)
    assert answers["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Message"
    }
    assert "request-id" in answers["200"]["headers"]
    stream = answers["200"]["content"]["text/event-stream"]["schema"]
    assert stream["required"] == ["event", "data"]
    for status in ("400", "401", "402", "403", "404", "413", "429", "502", "503", "504", "529"):
        assert answers[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/AnthropicErrorEnvelope"
        }
    envelope = document["components"]["schemas"]["AnthropicErrorEnvelope"]
    assert envelope["additionalProperties"] is False  # no `code`
    headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
    assert {"anthropic-version", "anthropic-beta", "X-Mortar-Session"} <= headers

    counting = operations(document)["count_message_tokens"]
    assert counting["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CountTokensRequest"
    }
    assert counting["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TokenCount"
    }


def test_every_operation_declares_its_answers_with_schemas(document: dict[str, Any]) -> None:
    declared = operations(document)

    assert set(declared) == {
        "create_chat_completion",
        "create_message",
        "count_message_tokens",
        "list_models",
        "get_budget",
        "stop_generation",
        "telemetry_stream",
        "replay_run",
        "rerun_run",
    }
    for operation_id, operation in declared.items():
        for status, answer in operation["responses"].items():
            assert answer.get("content"), (operation_id, status)
            for media_type in answer["content"].values():
                assert media_type["schema"], (operation_id, status)
    replay_error = declared["replay_run"]["responses"]["410"]["content"]["application/json"]
    assert replay_error["schema"] == {"$ref": "#/components/schemas/FlatErrorEnvelope"}
    # A re-run answers as a completion does: the OpenAI envelope, 410 included.
    rerun_error = declared["rerun_run"]["responses"]["410"]["content"]["application/json"]
    assert rerun_error["schema"] == {"$ref": "#/components/schemas/ErrorEnvelope"}
    assert declared["rerun_run"]["requestBody"]["required"] is False
    parameters = {(p["in"], p["name"]) for p in declared["replay_run"]["parameters"]}
    assert parameters == {
        ("path", "run_id"),
        ("query", "from"),
        ("query", "pace"),
        ("header", "Last-Event-ID"),
    }
    parameters = {(p["in"], p["name"]) for p in declared["telemetry_stream"]["parameters"]}
    assert parameters == {
        ("query", "session"),
        ("query", "last_event_id"),
        ("header", "Last-Event-ID"),
    }


def test_every_reference_names_a_component(document: dict[str, Any]) -> None:
    text = orjson.dumps(document).decode()
    references = set(re.findall(r'"\$ref":"#/components/schemas/([^"]+)"', text))

    assert references <= set(document["components"]["schemas"])
    assert {"ChatCompletionRequest", "ChatCompletionChunk", "TelemetryEvent", "ModelList"} <= (
        references
    )


def test_the_image_part_is_declared(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]

    part = schemas["ImagePart"]
    assert part["required"] == ["type", "image_url"]
    assert part["properties"]["type"] == {"const": "image_url", "title": "Type", "type": "string"}
    assert part["properties"]["image_url"] == {"$ref": "#/components/schemas/ImageUrl"}
    url = schemas["ImageUrl"]["properties"]["url"]
    assert url["type"] == "string"
    assert "data:image/<png|jpeg|webp|gif>;base64" in url["description"]
    assert "6 MiB" in url["description"]
    # Every other part type but text is accepted and dropped.
    assert schemas["OtherPart"]["properties"]["type"]["not"] == {"enum": ["text", "image_url"]}
