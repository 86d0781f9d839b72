"""Images on models with vision, end to end: the real server, the mock model server, the run
store.

Refusals are 400 `invalid_image` in the OpenAI envelope with the part as `param`, and still
runs; accepted images are forwarded as sent, counted with Qwen2.5-VL's formula, and stored once
per organization by content; models without vision keep dropping image parts.
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import orjson
import pytest
from PIL import Image as PillowImage

from gateway.models import CatalogModel, Deployment
from gateway.tokens import default_counter
from telemetry.models import Image, Run, RunImage
from telemetry.store.images import BASE64_REFERENCE_PREFIX, REFERENCE_PREFIX
from telemetry.stored_bodies import body_with_images
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.images import (
    data_url,
    image_bytes,
    image_part,
    png_header_claiming,
    text_part,
)
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

VISION = "vision-scripted"
VISION_SMALL = "vision-scripted-4k"  # the default model's window, 4,096 tokens
VISION_UPSTREAM = "vision-upstream"
NOT_VISION = "Qwen/Qwen2.5-7B-Instruct"
QUESTION = "What does max_tokens limit?"
ANSWER = "It caps how many tokens the model may generate for this reply."
# The question alone: 17 prompt tokens (the API's streaming example).
QUESTION_TOKENS = 17


@pytest.fixture(scope="module")
def vision_models(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> None:
    """Scripted models with vision, committed for the server process."""
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.get_or_create(name="scripted-vision")
        for model_id, window in ((VISION, 32768), (VISION_SMALL, 4096)):
            CatalogModel.objects.update_or_create(
                id=model_id,
                defaults={"deployment": deployment, "context_window": window, "vision": True},
            )


@pytest.fixture(scope="module")
def vision_upstream(
    upstream_models: MockPair, django_db_blocker, sees_other_connections: None
) -> MockPair:
    """A model with vision on the `mock-one` deployment (the mock model server)."""
    with django_db_blocker.unblock():
        CatalogModel.objects.update_or_create(
            id=VISION_UPSTREAM,
            defaults={
                "deployment": Deployment.objects.get(name="mock-one"),
                "context_window": 32768,
                "vision": True,
            },
        )
    return upstream_models


def post(server: ServerProcess, secret: str, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps({"stream": False, **body})
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=content,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        timeout=30,
    )


def asking(url: str, text: str = QUESTION, **fields: Any) -> dict[str, Any]:
    """A request whose user message is `text` and then the image."""
    return {
        "messages": [{"role": "user", "content": [text_part(text), image_part(url)]}],
        **fields,
    }


def images_of(run_id: str) -> list[RunImage]:
    return list(RunImage.objects.filter(run_id=run_id).select_related("image"))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Refusals.


@dataclass(frozen=True)
class Refused:
    body: Callable[[], dict[str, Any]]
    param: str
    says: str
    model: str = VISION
    resolved: bool = True  # refused after the model was resolved (not by the schema)


def on(role: str) -> Callable[[], dict[str, Any]]:
    def body() -> dict[str, Any]:
        message = {
            "role": role,
            "content": [text_part("See:"), image_part(data_url(image_bytes()))],
        }
        return {"messages": [{"role": "user", "content": "Hi"}, message]}

    return body


def bmp_url() -> str:
    buffer = io.BytesIO()
    PillowImage.new("RGB", (8, 8)).save(buffer, format="BMP")
    return data_url(buffer.getvalue(), "image/bmp")


def non_canonical_url() -> str:
    data = image_bytes()
    data += b"\0" * (1 if len(data) % 3 == 0 else 0)  # padded base64; a PNG allows a tail
    payload = base64.b64encode(data).decode()
    at = len(payload.rstrip("=")) - 1
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    payload = payload[:at] + alphabet[alphabet.index(payload[at]) + 1] + payload[at + 1 :]
    return f"data:image/png;base64,{payload}"


REFUSALS = {
    "remote-https-url": Refused(
        lambda: asking("https://example.com/cat.png"), "messages[0].content[1]", "never fetches"
    ),
    "remote-http-url": Refused(
        lambda: asking("http://127.0.0.1:9/cat.png"), "messages[0].content[1]", "never fetches"
    ),
    "image-on-assistant": Refused(
        on("assistant"), "messages[1].content[1]", "only allowed on user messages"
    ),
    "image-on-system": Refused(
        on("system"), "messages[1].content[1]", "only allowed on user messages"
    ),
    "media-type-bmp": Refused(
        lambda: asking(bmp_url()), "messages[0].content[1]", "media type 'image/bmp'"
    ),
    "broken-base64": Refused(
        lambda: asking("data:image/png;base64,iVBORw0K\nGgo="),
        "messages[0].content[1]",
        "not valid base64",
    ),
    "non-canonical-base64": Refused(
        lambda: asking(non_canonical_url()), "messages[0].content[1]", "not canonical base64"
    ),
    "jpeg-bytes-said-png": Refused(
        lambda: asking(data_url(image_bytes("image/jpeg"), "image/png")),
        "messages[0].content[1]",
        "is not a PNG image",
    ),
    "decompression-bomb": Refused(
        lambda: asking(data_url(png_header_claiming(40_000, 40_000))),
        "messages[0].content[1]",
        "more pixels than the limit",
    ),
    "not-a-data-url": Refused(
        lambda: asking("file:///etc/passwd"), "messages[0].content[1]", "base64 data URL"
    ),
    # The part's shape is the contract's, whatever the model.
    "part-without-image_url-on-vision": Refused(
        lambda: {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        "messages[0].content[0]",
        "must be an object",
        resolved=False,
    ),
    "part-with-url-a-number-not-vision": Refused(
        lambda: {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": 7}}]}
            ]
        },
        "messages[0].content[0]",
        "must be a string",
        model=NOT_VISION,
        resolved=False,
    ),
}


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_bad_image_is_refused_with_invalid_image_at_its_part_and_recorded(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None, case: Refused
) -> None:
    content = orjson.dumps({"stream": False, "model": case.model, **case.body()})

    response = post(mortar_server, tenant.secret, content)

    assert response.status_code == 400, response.text[:500]
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert sorted(error) == ["code", "message", "param", "type"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_image",
        case.param,
    )
    assert case.says in error["message"]
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (run.status, run.http_status, run.error_code, run.error_message) == (
        Run.Status.REFUSED,
        400,
        "invalid_image",
        error["message"],
    )
    assert run.model == (case.model if case.resolved else "")
    assert bytes(run.request_body) == content  # kept as received: no image was stored
    assert stored_bytes(run) == response.content
    assert images_of(run.id) == []


def test_an_image_over_the_body_limit_is_a_413_before_any_image_rule(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None
) -> None:
    # 6 MiB of characters is the image rule; the 4 MiB body limit comes first (the whole
    # body is read before any field), so a 400 for the image size cannot be reached over HTTP here.
    data = image_bytes() + b"\0" * (3 * 1024 * 1024)

    response = post(mortar_server, tenant.secret, asking(data_url(data), model=VISION))

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


# Accepted images.


@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg", "image/webp", "image/gif"])
def test_a_vision_model_takes_each_image_type_counts_it_and_stores_it_once(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None, media_type: str
) -> None:
    data = image_bytes(media_type, (1024, 768))
    url = data_url(data, media_type)
    content = orjson.dumps({"stream": False, **asking(url, model=VISION)})

    response = post(mortar_server, tenant.secret, content)

    assert response.status_code == 200, response.text[:500]
    completion = response.json()
    assert completion["choices"][0]["message"]["content"] == ANSWER
    # The text, and 1024 x 768 resized to 1036 x 756: 37 x 27 = 999 patches, + 2.
    assert completion["usage"]["prompt_tokens"] == QUESTION_TOKENS + 1001
    run = wait_for_run(completion["id"])
    assert (run.status, run.prompt_tokens) == (Run.Status.COMPLETED, QUESTION_TOKENS + 1001)
    [stored] = wait_until(lambda: images_of(run.id))
    assert (stored.position, stored.param) == (0, "messages[0].content[1]")
    image = stored.image
    assert (image.organization_id, image.sha256, image.media_type) == (
        tenant.organization.id,
        sha256(data),
        media_type,
    )
    assert (image.width, image.height, image.size, bytes(image.data)) == (
        1024,
        768,
        len(data),
        data,
    )
    # The stored body names the image instead of repeating it, and turns back into the body.
    body = bytes(run.request_body)
    assert url.encode() not in body
    assert f'"{REFERENCE_PREFIX}{sha256(data)}"'.encode() in body
    assert body_with_images(body, {image.sha256: (media_type, data)}) == content
    assert run.request_bytes == len(content)


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        pytest.param((1, 1), 6, id="tiny-1x1-scaled-up-to-min-pixels"),
        pytest.param((100, 50), 10, id="100x50"),
        pytest.param((1920, 1080), 2693, id="1920x1080"),
        pytest.param((5000, 3000), 16337, id="huge-5000x3000-scaled-down-to-max-pixels"),
    ],
)
def test_prompt_tokens_follow_qwen25_vl_s_formula(
    mortar_server: ServerProcess,
    tenant: Tenant,
    vision_models: None,
    size: tuple[int, int],
    tokens: int,
) -> None:
    url = data_url(image_bytes("image/png", size, mode="L"))

    response = post(mortar_server, tenant.secret, asking(url, model=VISION))

    assert response.status_code == 200, response.text[:500]
    assert response.json()["usage"]["prompt_tokens"] == QUESTION_TOKENS + tokens


def test_two_images_and_two_texts_count_all_four(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None
) -> None:
    small, large = data_url(image_bytes(size=(28, 28))), data_url(image_bytes(size=(448, 448)))
    parts = [text_part("What does "), image_part(small), text_part("max_tokens limit?")]
    messages = [{"role": "user", "content": [*parts, image_part(large)]}]

    response = post(mortar_server, tenant.secret, {"model": VISION, "messages": messages})

    assert response.status_code == 200, response.text[:500]
    # The text parts count as the template joins them: "What does max_tokens limit?".
    assert response.json()["usage"]["prompt_tokens"] == QUESTION_TOKENS + 6 + 258
    # The scripted model reads the text parts joined with a line break: the example's question.
    assert response.json()["choices"][0]["message"]["content"] == ANSWER


def test_the_context_window_check_counts_the_images(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None
) -> None:
    url = data_url(image_bytes(size=(1920, 1080)))  # 2,693 tokens
    fits = post(mortar_server, tenant.secret, asking(url, model=VISION_SMALL))
    assert fits.status_code == 200
    assert fits.json()["usage"]["prompt_tokens"] == QUESTION_TOKENS + 2693

    too_large = post(
        mortar_server,
        tenant.secret,
        {
            "model": VISION_SMALL,
            "messages": [
                {"role": "user", "content": [text_part(QUESTION), image_part(url), image_part(url)]}
            ],
        },
    )

    assert too_large.status_code == 400
    error = too_large.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert f"The prompt is {QUESTION_TOKENS + 2 * 2693} tokens" in error["message"]


def test_the_openai_sdk_sends_an_image_and_streams_the_answer(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None
) -> None:
    client = openai.OpenAI(
        base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret, max_retries=0
    )
    url = data_url(image_bytes("image/webp", (64, 64)), "image/webp")

    chunks = list(
        client.chat.completions.create(
            model=VISION,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Describe it"},
                        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                    ],
                }
            ],
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    text = "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].delta
    )
    assert text == "You said: Describe it"
    assert chunks[-1].usage is not None
    counter = default_counter()
    # 64 x 64 rounds to 56 x 56: 4 patches + 2.
    assert chunks[-1].usage.prompt_tokens == 11 + counter.count("Describe it") + 6
    assert len(wait_until(lambda: images_of(chunks[0].id))) == 1


# Forwarded to a model server.


def test_the_data_url_reaches_the_model_server_unchanged_and_is_stored_by_reference(
    mortar_server: ServerProcess, tenant: Tenant, vision_upstream: MockPair
) -> None:
    mock_reset(vision_upstream.a)
    data = image_bytes("image/png", (300, 200))
    url = data_url(data)
    body = {
        "model": VISION_UPSTREAM,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    text_part("What is this? [mock chunks=2 usage=0]"),
                    {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
                ],
            },
        ],
    }

    response = post(mortar_server, tenant.secret, body)

    assert response.status_code == 200, response.text[:500]
    assert response.json()["choices"][0]["message"]["content"] == "tok0 tok1"
    [arrived] = mock_requests(vision_upstream.a)
    assert arrived["body"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this? [mock chunks=2 usage=0]"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        },
    ]
    # The model server reported no usage: Mortar's estimate counts the image by the formula.
    # 300 x 200 rounds to 308 x 196: 11 x 7 = 77 patches, + 2.
    counter = default_counter()
    expected = counter.prompt_tokens(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is this? [mock chunks=2 usage=0]"},
        ]
    )
    assert response.json()["usage"]["prompt_tokens"] == expected + 79
    run = wait_for_run(response.json()["id"])
    assert run.usage_source == "estimate"
    sent = bytes(run.upstream_request)
    assert url.encode() not in sent
    restored = body_with_images(sent, {sha256(data): ("image/png", data)})
    assert orjson.loads(restored) == arrived["body"]
    assert [i.image.sha256 for i in images_of(run.id)] == [sha256(data)]


# Stored once by content, per organization.


def test_fifty_runs_with_the_same_image_store_it_once(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None
) -> None:
    data = image_bytes("image/png", (800, 600))
    url = data_url(data)
    run_ids = []
    for turn in range(50):
        response = post(mortar_server, tenant.secret, asking(url, f"Turn {turn}", model=VISION))
        assert response.status_code == 200, response.text[:500]
        run_ids.append(response.json()["id"])

    runs = [wait_for_run(run_id) for run_id in run_ids]
    wait_until(lambda: RunImage.objects.filter(run_id__in=run_ids).count() == 50)
    [image] = Image.objects.filter(sha256=sha256(data))
    assert image.organization_id == tenant.organization.id
    assert set(RunImage.objects.filter(run_id__in=run_ids).values_list("image_id", flat=True)) == {
        image.id
    }
    reference = f'"{REFERENCE_PREFIX}{image.sha256}"'.encode()
    for run in runs:
        body = bytes(run.request_body)
        assert reference in body and url.encode() not in body
        assert len(body) < 300  # the 50 stored bodies hold no image bytes


def test_another_organization_sending_the_same_image_gets_a_row_of_its_own(
    mortar_server: ServerProcess, tenant: Tenant, other_tenant: Tenant, vision_models: None
) -> None:
    data = image_bytes("image/gif", (20, 20))
    url = data_url(data, "image/gif")
    ours = post(mortar_server, tenant.secret, asking(url, model=VISION)).json()["id"]
    theirs = post(mortar_server, other_tenant.secret, asking(url, model=VISION)).json()["id"]

    [our_link] = wait_until(lambda: images_of(ours))
    [their_link] = wait_until(lambda: images_of(theirs))

    assert our_link.image_id != their_link.image_id
    assert our_link.image.organization_id == tenant.organization.id
    assert their_link.image.organization_id == other_tenant.organization.id
    assert Image.objects.filter(sha256=sha256(data)).count() == 2


# Models without vision.


def test_a_model_without_vision_drops_image_parts_as_before(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    # Even a remote URL: for a model without vision the part is dropped, never checked.
    for url in (data_url(image_bytes(size=(1024, 768))), "https://example.com/cat.png"):
        content = orjson.dumps({"stream": False, **asking(url, model=NOT_VISION)})

        response = post(mortar_server, tenant.secret, content)

        assert response.status_code == 200, response.text[:500]
        completion = response.json()
        assert completion["choices"][0]["message"]["content"] == ANSWER
        assert completion["usage"]["prompt_tokens"] == QUESTION_TOKENS  # no image counted
        run = wait_for_run(completion["id"])
        assert bytes(run.request_body) == content
        assert images_of(run.id) == []


# The Messages route: `image` blocks are the same images, checked, counted and stored alike.


def post_message(server: ServerProcess, secret: str, content: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/messages",
        content=content,
        headers={"x-api-key": secret, "Content-Type": "application/json"},
        timeout=30,
    )


def message_asking(media_type: str, data: str, text: str = QUESTION) -> bytes:
    block = {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return orjson.dumps(
        {
            "model": VISION,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}, block]}],
        }
    )


@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg", "image/webp", "image/gif"])
def test_a_messages_image_block_is_counted_and_stored_once_by_reference(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None, media_type: str
) -> None:
    data = image_bytes(media_type, (1024, 768))
    encoded = base64.b64encode(data).decode()
    content = message_asking(media_type, encoded)

    response = post_message(mortar_server, tenant.secret, content)

    assert response.status_code == 200, response.text[:500]
    message = response.json()
    assert message["content"] == [{"type": "text", "text": ANSWER}]
    # As on chat completions: 1024 x 768 is 999 patches + 2, beside the question's tokens.
    assert message["usage"]["input_tokens"] == QUESTION_TOKENS + 1001
    run = wait_for_run(message["id"])
    [stored] = wait_until(lambda: images_of(run.id))
    assert (stored.image.sha256, stored.image.media_type) == (sha256(data), media_type)
    body = bytes(run.request_body)
    assert encoded.encode() not in body
    assert f'"{BASE64_REFERENCE_PREFIX}{sha256(data)}"'.encode() in body
    assert body_with_images(body, {sha256(data): (media_type, data)}) == content


def test_messages_runs_with_the_same_image_store_it_once(
    mortar_server: ServerProcess, tenant: Tenant, vision_models: None
) -> None:
    data = image_bytes("image/png", (640, 480))
    encoded = base64.b64encode(data).decode()
    run_ids = []
    for turn in range(5):
        response = post_message(
            mortar_server, tenant.secret, message_asking("image/png", encoded, f"Turn {turn}")
        )
        assert response.status_code == 200, response.text[:500]
        run_ids.append(response.json()["id"])

    wait_until(lambda: RunImage.objects.filter(run_id__in=run_ids).count() == 5)
    stored = Image.objects.filter(organization_id=tenant.organization.id, sha256=sha256(data))
    assert stored.count() == 1
    for run in (wait_for_run(run_id) for run_id in run_ids):
        assert len(bytes(run.request_body)) < 400  # no image bytes in the stored body


@pytest.mark.parametrize(
    ("media_type", "data", "says"),
    [
        pytest.param("image/png", "not base64!", "base64", id="broken-base64"),
        pytest.param(
            "image/png",
            base64.b64encode(b"GIF89a" + b"\0" * 64).decode(),
            "image/png",
            id="bytes-of-another-type",
        ),
    ],
)
def test_a_bad_messages_image_is_refused_in_anthropic_s_envelope(
    mortar_server: ServerProcess,
    tenant: Tenant,
    vision_models: None,
    media_type: str,
    data: str,
    says: str,
) -> None:
    response = post_message(mortar_server, tenant.secret, message_asking(media_type, data))

    assert response.status_code == 400, response.text[:500]
    body = response.json()
    assert body["type"] == "error" and "code" not in body["error"]
    assert body["error"]["type"] == "invalid_request_error"
    assert says in body["error"]["message"]
