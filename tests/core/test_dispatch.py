"""`core.http.dispatch.ApiDispatch`, driven as an ASGI app with views of its own.

What a server would do is played here message by message: the body in parts, a disconnect. The
API's own routes are tested on real server processes (tests/gateway/test_api_dispatch.py);
these pin what the dispatch does whatever the views: resolving, the envelope of each answer,
errors no view answered, streams sent as they come, a client that leaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest
from django.http import HttpResponse, HttpResponseNotAllowed, StreamingHttpResponse
from django.urls import path

from core.errors import MortarError
from core.http.dispatch import ApiDispatch
from core.http.envelopes import MORTAR_ENVELOPE, Envelope
from core.http.routes import ApiRoute


class PlainEnvelope(Envelope):
    request_id_header = "request-id"

    def body(self, error: MortarError) -> dict[str, Any]:
        return {"problem": error.code}


PLAIN = PlainEnvelope()
seen: dict[str, Any] = {}
stream_parts: list[bytes] = []


async def echo(request: Any, **kwargs: Any) -> HttpResponse:
    seen.update(kwargs=kwargs, query=request.GET.getlist("a"), body=request.body)
    seen.update(envelope=request.envelope, size=request.body_size)
    return HttpResponse(b"ok", content_type="text/plain")


async def literal(request: Any) -> HttpResponse:
    return HttpResponse(b"literal", content_type="text/plain")


async def broken(request: Any) -> HttpResponse:
    raise RuntimeError("a bug")


async def wrong_method(request: Any) -> HttpResponse:
    return HttpResponseNotAllowed(["POST"])


async def stream(request: Any) -> StreamingHttpResponse:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one", b"two", b"three"):
            stream_parts.append(part)
            yield part
            await asyncio.sleep(0.05)

    return StreamingHttpResponse(parts(), content_type="text/event-stream")


async def slow(request: Any) -> HttpResponse:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen["cancelled"] = True
        raise
    return HttpResponse(b"late")


def document(request: Any) -> HttpResponse:  # a plain view, as ninja's document is
    return HttpResponse(b'{"openapi": "3.1.0"}', content_type="application/json")


def dispatch() -> ApiDispatch:
    routes = [
        ApiRoute(path("things/<name>", echo), MORTAR_ENVELOPE),
        ApiRoute(path("things/literal", literal), MORTAR_ENVELOPE),  # <name> takes it first
        ApiRoute(path("plain/broken", broken), PLAIN),
        ApiRoute(path("plain/post-only", wrong_method), PLAIN),
        ApiRoute(path("stream", stream), MORTAR_ENVELOPE),
        ApiRoute(path("slow", slow), MORTAR_ENVELOPE),
        ApiRoute(path("openapi.json", document), MORTAR_ENVELOPE),
    ]
    return ApiDispatch(
        prefix="/api/",
        routes=routes,
        prefixes={"plain": PLAIN},
        envelope=MORTAR_ENVELOPE,
        body_limit=8,
    )


async def call(
    app: ApiDispatch,
    target: str,
    *,
    method: str = "GET",
    body: list[bytes] | None = None,
    headers: Mapping[str, str] | None = None,
    leave_after: int | None = None,
) -> list[Mapping[str, Any]]:
    """The messages the app sends for one request; with `leave_after`, the client disconnects
    once that many messages were sent."""
    route, _, query = target.partition("?")
    scope = {
        "type": "http",
        "method": method,
        "path": route,
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    incoming: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue()
    parts = body or [b""]
    for index, part in enumerate(parts):
        incoming.put_nowait(
            {"type": "http.request", "body": part, "more_body": index < len(parts) - 1}
        )
    sent: list[Mapping[str, Any]] = []
    enough = asyncio.Event()

    async def receive() -> Mapping[str, Any]:
        return await incoming.get()

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)
        if leave_after is not None and len(sent) >= leave_after:
            enough.set()

    task = asyncio.create_task(app(scope, receive, send))
    if leave_after is None:
        await task
        incoming.put_nowait({"type": "http.disconnect"})
        return sent
    if leave_after > 0:
        await enough.wait()
    incoming.put_nowait({"type": "http.disconnect"})
    await asyncio.wait_for(task, 5)
    return sent


def answer(sent: list[Mapping[str, Any]]) -> tuple[int, dict[str, str], bytes]:
    start = sent[0]
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


async def test_path_parameters_query_and_body_reach_the_view() -> None:
    status, headers, body = answer(
        await call(dispatch(), "/api/things/a%20b?a=1&a=2", body=[b"0123", b"4567"])
    )

    assert (status, body) == (200, b"ok")
    assert seen["kwargs"] == {"name": "a%20b"}
    assert seen["query"] == ["1", "2"]
    assert (seen["body"], seen["size"]) == (b"01234567", 8)
    assert seen["envelope"] is MORTAR_ENVELOPE
    assert headers["x-request-id"].startswith("req_")
    assert headers["content-length"] == "2"


async def test_an_earlier_pattern_takes_a_literal_path_as_djangos_resolver_would() -> None:
    await call(dispatch(), "/api/things/literal")

    assert seen["kwargs"] == {"name": "literal"}


async def test_a_body_past_the_limit_is_kept_one_byte_past_it_and_counted_whole() -> None:
    await call(dispatch(), "/api/things/x", body=[b"0123456789", b"abcdef"])

    assert (seen["body"], seen["size"]) == (b"012345678", 16)


async def test_an_unknown_path_is_a_404_in_the_envelope_of_the_prefix_it_is_under() -> None:
    app = dispatch()
    elsewhere = answer(await call(app, "/api/nowhere", headers={"X-Request-Id": "mine-1"}))
    under_plain = answer(await call(app, "/api/plain/nowhere", headers={"X-Request-Id": "mine-2"}))

    assert elsewhere[0] == under_plain[0] == 404
    assert orjson.loads(elsewhere[2])["error"]["code"] == "not_found"
    assert elsewhere[1]["x-request-id"] == "mine-1" and "request-id" not in elsewhere[1]
    assert orjson.loads(under_plain[2]) == {"problem": "not_found"}
    assert under_plain[1]["x-request-id"] == under_plain[1]["request-id"] == "mine-2"


async def test_an_error_page_that_is_not_json_becomes_the_routes_envelope_with_its_allow() -> None:
    status, headers, body = answer(await call(dispatch(), "/api/plain/post-only"))

    assert (status, orjson.loads(body)) == (405, {"problem": "method_not_allowed"})
    assert (headers["allow"], headers["content-type"]) == ("POST", "application/json")


async def test_an_exception_no_handler_took_is_a_logged_500_in_the_routes_envelope(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="core.http.dispatch"):
        status, headers, body = answer(await call(dispatch(), "/api/plain/broken"))

    assert (status, orjson.loads(body)) == (500, {"problem": "internal_error"})
    assert headers["request-id"] == headers["x-request-id"]
    assert "GET /api/plain/broken failed" in caplog.text and "a bug" in caplog.text


async def test_a_plain_view_is_called_too() -> None:
    status, _, body = answer(await call(dispatch(), "/api/openapi.json"))

    assert (status, body) == (200, b'{"openapi": "3.1.0"}')


async def test_a_stream_goes_out_one_message_per_part_as_each_is_made() -> None:
    stream_parts.clear()
    sent = await call(dispatch(), "/api/stream")

    assert [m.get("body") for m in sent[1:]] == [b"one", b"two", b"three", b""]
    assert [m.get("more_body") for m in sent[1:]] == [True, True, True, False]
    assert "content-length" not in answer(sent)[1]


async def test_a_client_that_leaves_mid_stream_stops_it() -> None:
    stream_parts.clear()
    sent = await call(dispatch(), "/api/stream", leave_after=2)

    assert stream_parts[:1] == [b"one"] and len(stream_parts) < 3
    assert sent[-1].get("more_body") is True  # never finished


async def test_a_client_that_leaves_before_the_answer_cancels_the_view() -> None:
    seen.pop("cancelled", None)
    app = dispatch()
    task = asyncio.create_task(call(app, "/api/slow", leave_after=0))

    sent = await asyncio.wait_for(task, 5)

    assert seen["cancelled"] is True
    assert sent == []
