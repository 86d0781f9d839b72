"""Small real images for the vision tests, made with Pillow, and the parts that carry them."""

from __future__ import annotations

import base64
import io
import itertools
import struct
import zlib
from typing import Any

from PIL import Image

# Pillow's format name for each media type Mortar accepts.
FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP", "image/gif": "GIF"}

_colors = itertools.count(1)


def image_bytes(
    media_type: str = "image/png",
    size: tuple[int, int] = (40, 30),
    *,
    color: int | None = None,
    mode: str = "RGB",
) -> bytes:
    """A real image of `size` (width, height) in the media type's format; a new colour each
    call unless one is given, so its bytes (and their hash) are new to the database."""
    shade = next(_colors) if color is None else color
    fill: int | tuple[int, int, int]
    fill = shade % 256 if mode == "L" else (shade % 256, (shade // 256) % 256, 77)
    buffer = io.BytesIO()
    Image.new(mode, size, fill).save(buffer, format=FORMATS[media_type])
    return buffer.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims `width` x `height` pixels and whose image data is empty: what a
    decompression bomb looks like to a reader of headers (which stops at the data)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"")
        + _png_chunk(b"IEND", b"")
    )
