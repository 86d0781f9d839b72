"""Hostile input at every edge of the API, against a real Mortar process.

Hypothesis makes what an attacker would send — JSON of any shape, numbers past 2^64, strings
with NULs and other control characters, unicode of every plane, bodies that are not JSON or not
UTF-8, odd headers, path segments with anything percent-encoded in them — to chat completions,
Messages and its token count, replay, stop, the telemetry stream, the model list and the budget.
Every answer must be below 500, and every error must be in its route's documented envelope:
OpenAI's (`{"error": {"message", "type", "param", "code"}}`), Anthropic's on `/v1/messages`,
Mortar's flat one on replay. `/v1/generations/{id}/stop` answers 404 `{"stopped": false}` for
anything that is not running.

Bounded: a few thousand requests in all (`BUDGET`), no shrinking, so `make test` stays fast;
a failure prints the request that caused it. tests/test_openapi_contract.py fuzzes the declared
schemas; this suite goes past them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

# Requests per test; a few thousand in all.
BUDGET = {
    "chat": 500,
    "messages": 350,
    "count_tokens": 200,
    "run_routes": 450,
    "telemetry": 100,
    "listing": 150,
    "bytes": 250,
}

# -- what is sent ------------------------------------------------------------------------------

HUGE = st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30, -(10**30), 2**1000])
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    HUGE,
    st.floats(allow_nan=True, allow_infinity=True),  # NaN and Infinity are not JSON: sent as is
)
# Text of every kind: control characters (NUL first), surrogates left out (not encodable).
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs", "Zl", "Zp"]), max_size=12),
    st.sampled_from(["\x00", "a\x00b", "\u202e", "\ufeff", "💥" * 3, "%00", "../..", " ", ""]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=8).map(lambda s: s * 50),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, HOSTILE_TEXT)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(HOSTILE_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)
MODELS = st.one_of(
    st.sampled_from(["scripted", "Qwen/Qwen2.5-7B-Instruct", "claude-scripted", ""]), HOSTILE_TEXT
)
ROLES = st.one_of(
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]),
    HOSTILE_TEXT,
)
CONTENT = st.one_of(
    HOSTILE_TEXT,
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": HOSTILE_TEXT}),
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["image_url", "image", "input_audio", "tool_use"]),
                    "image_url": st.one_of(JSON, st.fixed_dictionaries({"url": HOSTILE_TEXT})),
                    "source": JSON,
                }
            ),
            JSON,
        ),
        max_size=3,
    ),
    JSON,
)
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": ROLES, "content": CONTENT},
        optional={"name": HOSTILE_TEXT, "tool_call_id": JSON, "tool_calls": JSON},
    ),
    JSON,
)
# Fields of both surfaces, valid or not; the rest of the body is whatever JSON comes.
FIELDS = {
    "model": MODELS,
    "messages": st.one_of(st.lists(MESSAGE, max_size=4), JSON),
    "stream": st.one_of(st.just(False), JSON),
    "max_tokens": st.one_of(NUMBERS, JSON),
    "max_completion_tokens": NUMBERS,
    "temperature": NUMBERS,
    "top_p": NUMBERS,
    "stop": st.one_of(HOSTILE_TEXT, st.lists(HOSTILE_TEXT, max_size=5), JSON),
    "seed": NUMBERS,
    "n": NUMBERS,
    "user": st.one_of(HOSTILE_TEXT, JSON),
    "tools": JSON,
    "tool_choice": JSON,
    "parallel_tool_calls": JSON,
    "response_format": JSON,
    "logprobs": JSON,
    "top_logprobs": NUMBERS,
    "presence_penalty": NUMBERS,
    "frequency_penalty": NUMBERS,
    "stream_options": JSON,
    "system": st.one_of(HOSTILE_TEXT, JSON),
    "thinking": JSON,
    "metadata": JSON,
    "top_k": NUMBERS,
    "stop_sequences": JSON,
}
BODIES = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(MESSAGE, min_size=1, max_size=3)},
        optional={name: value for name, value in FIELDS.items() if name != "messages"},
    ),
    st.fixed_dictionaries({}, optional=FIELDS),
    JSON,
)


def _on_the_wire(raw: bytes) -> bytes:
    """The bytes of a header value HTTP allows: tab, visible ASCII and obs-text (0x80-0xFF).
    Anything else is refused by the HTTP parser before Mortar sees the request."""
    return bytes(b for b in raw if b == 0x09 or 0x20 <= b != 0x7F).strip(b" \t")


# Header values: any byte a client may put on the wire, UTF-8 or not.
HEADER_VALUE = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"99999999999999999999999-0", b"-1", b"0", b"on", b"off", b"named", b"\xff"]),
).map(_on_the_wire)
HEADER_NAMES = [
    "X-Mortar-Session",
    "X-Mortar-End-User-Id",
    "X-Mortar-Optimize",
    "X-Mortar-Tool-Select",
    "Idempotency-Key",
    "Accept",
    "Content-Type",
    "anthropic-version",
    "anthropic-beta",
    "Last-Event-ID",
    "X-Request-Id",
]
HEADERS = st.dictionaries(st.sampled_from(HEADER_NAMES), HEADER_VALUE, max_size=4)
# A path segment: anything, percent-encoded byte by byte (so NUL and `/` reach the server).
SEGMENT = st.one_of(HOSTILE_TEXT, st.text(max_size=60), HUGE.map(str)).map(
    lambda s: quote(s, safe="")
)
QUERY = st.dictionaries(
    st.sampled_from(["from", "pace", "session", "last_event_id", "stream", "x"]),
    st.one_of(HOSTILE_TEXT, HUGE.map(str), NUMBERS.map(str)),
    max_size=3,
)


def encoded(body: Any) -> bytes:
    """The body as JSON text: numbers of any size, NaN and Infinity as Python writes them (not
    JSON: the server must say so), every character escaped or not at random."""
    return json.dumps(body, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


# -- what must come back -----------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.statuses: Counter[int] = Counter()

    def count(self, status: int) -> None:
        self.statuses[status] += 1


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    counted = Tally()
    yield counted
    statuses = dict(sorted(counted.statuses.items()))
    elapsed = time.monotonic() - counted.started
    print(f"\nfuzz: {sum(statuses.values())} requests in {elapsed:.1f} s, statuses {statuses}")


def envelope_error(path: str, body: Any) -> str | None:
    """What is wrong with an error body for its route, or None."""
    if path.startswith("/v1/messages"):
        ok = (
            isinstance(body, dict)
            and body.get("type") == "error"
            and isinstance(body.get("error"), dict)
            and isinstance(body["error"].get("type"), str)
            and isinstance(body["error"].get("message"), str)
        )
        return None if ok else "not Anthropic's error envelope"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        flat = path.startswith("/v1/chat/completions/runs/") and isinstance(body.get("code"), str)
        return None if flat else "a flat envelope off the replay route"
    error = body.get("error") if isinstance(body, dict) else None
    ok = (
        isinstance(error, dict)
        and set(error) == {"message", "type", "param", "code"}
        and isinstance(error["message"], str)
        and isinstance(error["type"], str)
        and isinstance(error["code"], str)
        and (error["param"] is None or isinstance(error["param"], str))
    )
    return None if ok else "not the OpenAI error envelope"


def check(response: httpx.Response, tally: Tally) -> None:
    """No 5xx; an error is JSON in its route's envelope; every answer has its X-Request-Id."""
    response.read()
    tally.count(response.status_code)
    path = response.request.url.path
    note(f"{response.request.method} {response.request.url} -> {response.status_code}")
    note(f"answer: {response.text[:500]!r}")
    assert response.status_code < 500, response.text[:500]
    assert response.headers.get("X-Request-Id"), "no X-Request-Id"
    if response.status_code < 400:
        return
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    stop_answer = path.startswith("/v1/generations/") and response.status_code == 404
    if stop_answer and isinstance(body, dict) and "stopped" in body:
        assert body["stopped"] is False and isinstance(body["id"], str)
        return
    problem = envelope_error(path, body)
    assert problem is None, f"{problem}: {body!r}"


def bounded(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        # No shrinking: a failure is reported as found (with its request), and runs stay short.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def client(mortar_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as made:
        yield made


def auth(tenant: Tenant, anthropic: bool = False) -> dict[str, str]:
    if anthropic:
        return {"x-api-key": tenant.secret}
    return {"Authorization": f"Bearer {tenant.secret}"}


def post(client: httpx.Client, path: str, body: bytes, headers: dict[str, Any]) -> httpx.Response:
    # A stream that generates is read to its end: the scripted model answers in a moment.
    return client.send(client.build_request("POST", path, content=body, headers=headers))


KEYS = st.sampled_from(["tenant", "tenant", "tenant", "none", "bad"])


def key_headers(which: str, tenant: Tenant, anthropic: bool) -> dict[str, Any]:
    if which == "tenant":
        return auth(tenant, anthropic)
    if which == "bad":
        return {"Authorization": "Bearer mk-" + "0" * 48}
    return {}


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path", "anthropic"),
    [
        ("chat", "/v1/chat/completions", False),
        ("messages", "/v1/messages", True),
        ("count_tokens", "/v1/messages/count_tokens", True),
    ],
)
def test_no_body_or_header_gets_a_5xx(
    client: httpx.Client, tenant: Tenant, tally: Tally, name: str, path: str, anthropic: bool
) -> None:
    @bounded(BUDGET[name])
    @given(body=BODIES, headers=HEADERS, key=KEYS)
    def answered(body: Any, headers: dict[str, bytes], key: str) -> None:
        sent = {**headers, **key_headers(key, tenant, anthropic)}
        check(post(client, path, encoded(body), sent), tally)

    answered()


def test_no_raw_bytes_get_a_5xx(client: httpx.Client, tenant: Tenant, tally: Tally) -> None:
    """Bodies that are not JSON, not UTF-8, truncated, or JSON with a NUL in a key."""
    raw = st.one_of(
        st.binary(max_size=200),
        BODIES.map(encoded).flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),
        BODIES.map(lambda b: encoded(b).replace(b'"', b"'")),
        st.sampled_from(
            [b"", b"null", b"[]", b'"x"', b"1e999", b'{"messages": [}', b"\xff\xfe{}", b"{\x00}"]
        ),
    )

    @bounded(BUDGET["bytes"])
    @given(
        body=raw,
        path=st.sampled_from(["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"]),
    )
    def answered(body: bytes, path: str) -> None:
        check(post(client, path, body, auth(tenant, "messages" in path)), tally)

    answered()


def test_no_run_id_gets_a_5xx(client: httpx.Client, tenant: Tenant, tally: Tally) -> None:
    """Replay and stop, with any id in the path, any resume point and query."""

    @bounded(BUDGET["run_routes"])
    @given(
        segment=SEGMENT,
        route=st.sampled_from(["replay", "stop", "replay-extra"]),
        query=QUERY,
        headers=HEADERS,
        key=KEYS,
    )
    def answered(
        segment: str, route: str, query: dict[str, str], headers: dict[str, bytes], key: str
    ) -> None:
        sent = {**headers, **key_headers(key, tenant, False)}
        if route == "stop":
            request = client.build_request(
                "POST", f"/v1/generations/{segment}/stop", headers=sent, params=query
            )
        else:
            extra = "/download" if route == "replay-extra" else ""
            request = client.build_request(
                "GET", f"/v1/chat/completions/runs/{segment}{extra}", headers=sent, params=query
            )
        check(client.send(request), tally)

    answered()


def test_no_telemetry_resume_point_or_header_gets_a_5xx(
    mortar_server: ServerProcess, tenant: Tenant, tally: Tally
) -> None:
    """What the stream cannot serve is refused before it starts; what it can serve starts.

    A stream answered 200 is checked to start (`: connected`) and then left. That it stays
    open is tests/telemetry/test_event_ids.py's to show: streams opened one after another
    here, each left at once, were seen dropped now and then by the per-subscriber Redis read
    (one reader per worker replaces it).
    """

    @bounded(BUDGET["telemetry"])
    @given(query=QUERY, headers=HEADERS, key=KEYS)
    def answered(query: dict[str, str], headers: dict[str, bytes], key: str) -> None:
        sent = {**headers, **key_headers(key, tenant, False)}
        with httpx.stream(
            "GET",
            f"{mortar_server.base_url}/v1/telemetry/stream",
            params=query,
            headers=sent,
            timeout=httpx.Timeout(10),  # the answer may be slow to come under load
        ) as response:
            if response.status_code != 200:
                check(response, tally)
                return
            tally.count(200)
            note(f"GET {response.request.url} {sent} -> 200")
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers.get("X-Request-Id")
            assert next(response.iter_lines()) == ": connected"

    answered()


def test_no_query_or_header_on_the_listings_gets_a_5xx(
    client: httpx.Client, tenant: Tenant, tally: Tally
) -> None:
    """The model list, the budget, and paths under /v1/ that name nothing."""

    @bounded(BUDGET["listing"])
    @given(
        path=st.one_of(
            st.sampled_from(["/v1/models", "/v1/budget"]),
            SEGMENT.map(lambda s: f"/v1/{s}"),
            SEGMENT.map(lambda s: f"/v1/models/{s}"),
            SEGMENT.map(lambda s: f"/v1/messages/{s}"),
        ),
        method=st.sampled_from(["GET", "GET", "POST", "DELETE", "PUT"]),
        query=QUERY,
        headers=HEADERS,
        key=KEYS,
    )
    def answered(
        path: str, method: str, query: dict[str, str], headers: dict[str, bytes], key: str
    ) -> None:
        sent = {**headers, **key_headers(key, tenant, "messages" in path)}
        check(client.send(client.build_request(method, path, params=query, headers=sent)), tally)

    answered()
