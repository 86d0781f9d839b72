"""Images for models with vision: the checks of one image, and the step that gives a vision
model's messages their image parts back.

The rules, each refused with 400 `invalid_image` and the part as `param`, keep what reaches a
model server small, well formed and inline (Mortar never fetches anything on a client's behalf):

- images only on user messages;
- `image_url.url` an inline data URL, `data:image/<png|jpeg|webp|gif>;base64,…` — a remote
  `http(s)` URL is refused, Mortar never fetches a URL a client names — of at most 6 MiB of
  characters;
- canonical base64: exactly what encoding the bytes gives back (the standard alphabet, `=`
  padding, no line breaks, spaces or stray bits), so the URL names its bytes one way only;
- bytes that are an image of the declared type: Pillow reads the header (format and size) and
  never decodes the pixels; an image over Pillow's decompression-bomb threshold
  (`MAX_IMAGE_PIXELS`) or beyond the 200:1 aspect ratio Qwen2.5-VL's processor takes is refused.

Plain functions, so the Messages route checks its `image` blocks with them too
(`check_base64_image`). Models without vision keep the chat route's rule: image parts dropped
(`validation.py` has already joined the text).
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any, TypeGuard

from PIL import Image

from gateway.contract.chat import ChatRequest
from gateway.contract.messages import AnyPart, ImagePart, TextPart
from gateway.errors import InvalidImage

# media type -> Pillow's format name
MEDIA_TYPES = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/webp": "WEBP",
    "image/gif": "GIF",
}
MAX_DATA_URL_CHARS = 6 * 1024 * 1024
# Pillow's own decompression-bomb threshold (`Image.MAX_IMAGE_PIXELS`, ~ 9,459 px square): a
# model server decodes the image with Pillow and would refuse more (or warn and spend seconds).
MAX_IMAGE_PIXELS = 89_478_485
# Qwen2.5-VL's image processor refuses a longer side over 200 times the shorter (`smart_resize`).
MAX_ASPECT_RATIO = 200

_FORMATS = "|".join(media_type.removeprefix("image/") for media_type in MEDIA_TYPES)


@dataclass(frozen=True, slots=True)
class CheckedImage:
    """An image that passed the checks: its bytes and what its header says."""

    media_type: str
    data: bytes
    width: int
    height: int
    param: str  # where the request carried it: `messages[0].content[1]`


def check_image_url(url: str, *, param: str) -> CheckedImage:
    """The image `url` holds (an `image_url` part's url); raise InvalidImage to refuse it."""
    if len(url) > MAX_DATA_URL_CHARS:
        raise InvalidImage(
            f"The image at `{param}` is a data URL of {len(url):,} characters; the limit is "
            f"{MAX_DATA_URL_CHARS:,} (6 MiB).",
            param=param,
        )
    scheme = url[:8].lower()
    if scheme.startswith(("http://", "https://")):
        raise InvalidImage(
            f"The image at `{param}` is a remote URL; Mortar never fetches a URL a client names. "
            "Send the image inline as a data URL: `data:image/png;base64,…`.",
            param=param,
        )
    head, comma, payload = url.partition(",")
    # Spelt exactly so (lower case), as OpenAI's API documents it and model servers read it.
    if not (head.startswith("data:") and comma and head.endswith(";base64")):
        raise InvalidImage(
            f"The image at `{param}` must be a base64 data URL: "
            f"`data:image/<{_FORMATS}>;base64,…`.",
            param=param,
        )
    return check_base64_image(head[len("data:") : -len(";base64")], payload, param=param)


def check_base64_image(media_type: str, payload: str, *, param: str) -> CheckedImage:
    """The image of `media_type` whose canonical base64 is `payload`; raise InvalidImage to
    refuse it. (A Messages `image` block's `base64` source is checked with this.)"""
    image_format = MEDIA_TYPES.get(media_type)
    if image_format is None:
        raise InvalidImage(
            f"The image at `{param}` is of media type {media_type!r}; use image/png, image/jpeg, "
            "image/webp or image/gif.",
            param=param,
        )
    if len("data:;base64,") + len(media_type) + len(payload) > MAX_DATA_URL_CHARS:
        raise InvalidImage(
            f"The image at `{param}` is over the limit of {MAX_DATA_URL_CHARS:,} characters "
            "(6 MiB) as a data URL.",
            param=param,
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):  # ValueError: characters outside ASCII
        raise InvalidImage(f"The image at `{param}` is not valid base64.", param=param) from None
    if base64.b64encode(data) != payload.encode("ascii"):
        raise InvalidImage(
            f"The image at `{param}` is not canonical base64: use the standard alphabet with `=` "
            "padding, no line breaks or spaces, and zero bits after the last byte.",
            param=param,
        )
    width, height = _read_header(data, image_format, media_type, param)
    return CheckedImage(media_type=media_type, data=data, width=width, height=height, param=param)


def _read_header(data: bytes, image_format: str, media_type: str, param: str) -> tuple[int, int]:
    """The image's size from its header, read as the declared format only; the pixels are never
    decoded (`Image.open` is lazy)."""
    try:
        with Image.open(io.BytesIO(data), formats=[image_format]) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        raise InvalidImage(
            f"The image at `{param}` has more pixels than the limit of {MAX_IMAGE_PIXELS:,}.",
            param=param,
        ) from None
    except Exception:  # Pillow's plugins raise errors of many kinds on a damaged header
        raise InvalidImage(
            f"The image at `{param}` is not a {image_format} image, as its media type "
            f"{media_type} says.",
            param=param,
        ) from None
    if width < 1 or height < 1:
        raise InvalidImage(f"The image at `{param}` has no pixels.", param=param)
    if width * height > MAX_IMAGE_PIXELS:
        raise InvalidImage(
            f"The image at `{param}` is {width}x{height} pixels, more than the limit of "
            f"{MAX_IMAGE_PIXELS:,} pixels.",
            param=param,
        )
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise InvalidImage(
            f"The image at `{param}` is {width}x{height} pixels; its aspect ratio is over "
            f"{MAX_ASPECT_RATIO}:1.",
            param=param,
        )
    return width, height


def vision_images(chat: ChatRequest) -> list[CheckedImage]:
    """Check the image parts of a request to a model with vision, and put each message's parts
    back in place of its joined text: text and image parts in the order sent (an image's `url`
    unchanged), other parts dropped. The images, in the order of the request; raise
    InvalidImage naming the first part refused.
    """
    images: list[CheckedImage] = []
    for index, parts in chat.image_parts.items():
        message = chat.messages[index]
        content: list[dict[str, Any]] = []
        for position, part in enumerate(parts):
            if _is_text(part):
                content.append({"type": "text", "text": part["text"]})
            elif _is_image(part):
                param = f"messages[{index}].content[{position}]"
                if message["role"] != "user":
                    raise InvalidImage(
                        f"`{param}` is an image on a {message['role']} message; images are only "
                        "allowed on user messages.",
                        param=param,
                    )
                url = part["image_url"]["url"]
                images.append(check_image_url(url, param=param))
                # Only the url reaches the model server, not `detail`: Mortar forwards only
                # the fields it checked.
                content.append({"type": "image_url", "image_url": {"url": url}})
        chat.messages[index] = {**message, "content": content}
    return images


def _is_text(part: AnyPart) -> TypeGuard[TextPart]:
    return part["type"] == "text"


def _is_image(part: AnyPart) -> TypeGuard[ImagePart]:
    return part["type"] == "image_url"
