"""Unit tests of the image checks (`gateway.contract.images`): what a vision model accepts, each
refusal with its param, and how a request's image parts are put back for a vision model."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from PIL import Image

from core.errors import InvalidParameter
from gateway.contract.images import (
    MAX_DATA_URL_CHARS,
    check_base64_image,
    check_image_url,
    vision_images,
)
from gateway.contract.validation import validate_chat_request
from gateway.errors import InvalidImage
from tests.support.images import (
    data_url,
    image_bytes,
    image_part,
    png_header_claiming,
    text_part,
)

PARAM = "messages[0].content[1]"
B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def refusal(url: str) -> InvalidImage:
    with pytest.raises(InvalidImage) as refused:
        check_image_url(url, param=PARAM)
    error = refused.value
    assert (error.status, error.code, error.param) == (400, "invalid_image", PARAM)
    return error


@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg", "image/webp", "image/gif"])
def test_it_accepts_each_image_type_and_reads_its_size_from_the_header(media_type: str) -> None:
    data = image_bytes(media_type, (40, 30))

    image = check_image_url(data_url(data, media_type), param=PARAM)

    assert (image.media_type, image.width, image.height, image.param) == (
        media_type,
        40,
        30,
        PARAM,
    )
    assert image.data == data


@pytest.mark.parametrize(
    "url",
    ["https://example.com/cat.png", "http://127.0.0.1:9/cat.png", "HTTPS://EXAMPLE.COM/CAT.PNG"],
)
def test_it_refuses_a_remote_url_and_says_it_never_fetches(url: str) -> None:
    assert "never fetches" in refusal(url).message


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/cat.png",
        "cat.png",
        "",
        "data:image/png,iVBORw0KGgo=",  # not base64
        "data:image/png;base64",  # no comma, no data
    ],
)
def test_it_refuses_anything_but_a_base64_data_url(url: str) -> None:
    assert "must be a base64 data URL" in refusal(url).message


@pytest.mark.parametrize(
    "media_type", ["image/bmp", "image/svg+xml", "text/plain", "image/PNG", "image/jpg", ""]
)
def test_it_refuses_another_media_type(media_type: str) -> None:
    url = f"data:{media_type};base64,{base64.b64encode(image_bytes()).decode()}"

    assert f"media type {media_type!r}" in refusal(url).message


@pytest.mark.parametrize(
    "payload",
    [
        "@@@@",
        "iVBORw0KGgo",  # padding missing
        "iVBO Rw0K",  # a space
        "iVBORw0K\nGgo=",  # a line break
        "iVBORw0KGgo=é",  # not ASCII
        "iVBORw0KGgo=AAAA",  # data after the padding
    ],
)
def test_it_refuses_broken_base64(payload: str) -> None:
    assert "not valid base64" in refusal(f"data:image/png;base64,{payload}").message


def non_canonical(payload: str) -> str:
    """The same bytes with nonzero bits after the last byte: decodes alike, encodes otherwise."""
    assert payload.endswith("="), "needs a padded payload"
    at = len(payload.rstrip("=")) - 1
    return payload[:at] + B64_ALPHABET[B64_ALPHABET.index(payload[at]) + 1] + payload[at + 1 :]


def test_it_refuses_non_canonical_base64() -> None:
    data = image_bytes()
    data += b"\0" * (1 if len(data) % 3 == 0 else 0)  # a padded payload (PNGs allow a tail)
    payload = non_canonical(base64.b64encode(data).decode())
    assert base64.b64decode(payload) == data  # the same bytes, spelt another way

    assert "not canonical base64" in refusal(f"data:image/png;base64,{payload}").message


@pytest.mark.parametrize(
    ("data", "declared"),
    [
        pytest.param(image_bytes("image/png"), "image/jpeg", id="png-said-jpeg"),
        pytest.param(image_bytes("image/jpeg"), "image/png", id="jpeg-said-png"),
        pytest.param(image_bytes("image/gif"), "image/webp", id="gif-said-webp"),
        pytest.param(b"GIF87a", "image/gif", id="a-truncated-gif-header"),
        pytest.param(b"not an image at all", "image/png", id="text"),
        pytest.param(b"", "image/png", id="empty"),
    ],
)
def test_it_refuses_bytes_that_are_not_an_image_of_the_declared_type(
    data: bytes, declared: str
) -> None:
    error = refusal(data_url(data, declared))

    assert f"is not a {declared.removeprefix('image/').upper()} image" in error.message


def test_it_refuses_a_decompression_bomb_without_decoding_it() -> None:
    # 40,000 x 40,000 pixels claimed by a 57-byte file: past twice Pillow's threshold.
    error = refusal(data_url(png_header_claiming(40_000, 40_000)))

    assert "more pixels than the limit of 89,478,485" in error.message


def test_it_refuses_an_image_just_over_the_pixel_limit() -> None:
    with pytest.warns(Image.DecompressionBombWarning):  # Pillow warns between 1x and 2x
        error = refusal(data_url(png_header_claiming(10_000, 9_000)))

    assert "10000x9000 pixels, more than the limit of 89,478,485" in error.message


def test_a_header_is_enough_below_the_limit() -> None:
    # Only the header is read: an image whose pixels never came is taken at its word.
    image = check_image_url(data_url(png_header_claiming(5_000, 3_000)), param=PARAM)

    assert (image.width, image.height) == (5_000, 3_000)


def test_it_refuses_an_aspect_ratio_over_200_to_1() -> None:
    assert check_image_url(data_url(image_bytes(size=(200, 1))), param=PARAM).width == 200

    error = refusal(data_url(image_bytes(size=(1, 201))))

    assert "aspect ratio is over 200:1" in error.message


def test_a_data_url_over_6_mib_is_refused_before_it_is_decoded() -> None:
    url = "data:image/png;base64," + "A" * (MAX_DATA_URL_CHARS - 21)
    assert len(url) == MAX_DATA_URL_CHARS + 1

    error = refusal(url)

    assert "6 MiB" in error.message
    assert f"{MAX_DATA_URL_CHARS + 1:,} characters" in error.message


def test_a_data_url_just_under_6_mib_is_accepted() -> None:
    prefix = "data:image/png;base64,"
    decoded_size = (MAX_DATA_URL_CHARS - len(prefix)) // 4 * 3
    data = image_bytes()
    data += b"\0" * (decoded_size - len(data))  # a PNG tolerates bytes after its end
    url = data_url(data)
    assert MAX_DATA_URL_CHARS - 4 < len(url) <= MAX_DATA_URL_CHARS

    assert check_image_url(url, param=PARAM).data == data


def test_a_base64_source_is_checked_alike() -> None:
    data = image_bytes("image/webp", (9, 7))
    payload = base64.b64encode(data).decode()

    image = check_base64_image("image/webp", payload, param="messages[0].content[0]")

    assert (image.width, image.height, image.data) == (9, 7, data)
    with pytest.raises(InvalidImage, match="media type 'image/tiff'"):
        check_base64_image("image/tiff", payload, param="messages[0].content[0]")


# The request: image parts kept aside by validation, put back for a vision model.


def chat_with(*messages: dict[str, Any]) -> Any:
    return validate_chat_request({"messages": list(messages)})


def test_validation_joins_the_text_and_keeps_the_image_parts_aside() -> None:
    url = data_url(image_bytes())
    parts = [text_part("What is"), image_part(url), text_part("this?")]

    chat = chat_with({"role": "system", "content": "Be brief."}, {"role": "user", "content": parts})

    assert chat.messages[1] == {"role": "user", "content": "What is\nthis?"}
    assert list(chat.image_parts) == [1]
    assert chat.image_parts[1] == parts


def test_messages_without_an_image_part_are_not_kept_aside() -> None:
    chat = chat_with(
        {"role": "user", "content": [text_part("a"), {"type": "input_audio", "input_audio": {}}]}
    )

    assert chat.image_parts == {}


def test_vision_puts_text_and_image_parts_back_in_order_and_drops_the_rest() -> None:
    data = image_bytes("image/jpeg", (64, 48))
    url = data_url(data, "image/jpeg")
    chat = chat_with(
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                text_part("Compare"),
                {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                text_part("and"),
                image_part(url),
            ],
        },
    )

    images = vision_images(chat)

    assert chat.messages == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": url}},  # `detail` is not forwarded
                {"type": "text", "text": "and"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        },
    ]
    assert [(i.param, i.width, i.height, i.data) for i in images] == [
        ("messages[1].content[1]", 64, 48, data),
        ("messages[1].content[4]", 64, 48, data),
    ]


@pytest.mark.parametrize("role", ["system", "developer", "assistant"])
def test_vision_refuses_an_image_on_a_message_that_is_not_the_users(role: str) -> None:
    chat = chat_with(
        {"role": "user", "content": "Hello"},
        {"role": role, "content": [text_part("Look:"), image_part(data_url(image_bytes()))]},
    )

    with pytest.raises(InvalidImage) as refused:
        vision_images(chat)

    assert refused.value.param == "messages[1].content[1]"
    assert "only allowed on user messages" in refused.value.message


def test_vision_names_the_first_bad_part() -> None:
    chat = chat_with(
        {
            "role": "user",
            "content": [
                image_part(data_url(image_bytes())),
                image_part("https://example.com/a.png"),
                image_part("https://example.com/b.png"),
            ],
        }
    )

    with pytest.raises(InvalidImage) as refused:
        vision_images(chat)

    assert refused.value.param == "messages[0].content[1]"


@pytest.mark.parametrize(
    "part",
    [
        pytest.param({"type": "image_url"}, id="no-image_url"),
        pytest.param({"type": "image_url", "image_url": None}, id="image_url-null"),
        pytest.param({"type": "image_url", "image_url": "data:image/png;base64,"}, id="a-string"),
        pytest.param({"type": "image_url", "image_url": {}}, id="no-url"),
        pytest.param({"type": "image_url", "image_url": {"url": 42}}, id="url-a-number"),
    ],
)
def test_a_malformed_image_part_is_refused_at_the_part_whatever_the_model(
    part: dict[str, Any],
) -> None:
    with pytest.raises(InvalidImage) as refused:
        chat_with({"role": "user", "content": [text_part("Look:"), part]})

    assert (refused.value.code, refused.value.param) == ("invalid_image", "messages[0].content[1]")


def test_a_text_part_beside_an_image_is_still_checked_as_text() -> None:
    with pytest.raises(InvalidParameter) as refused:
        chat_with({"role": "user", "content": [image_part("x"), {"type": "text", "text": 1}]})

    assert refused.value.param == "messages[0].content[1].text"
