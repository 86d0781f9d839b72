"""The one token counter: context planning, estimated usage and reports all use it.

For Qwen models it is Qwen's real BPE, loaded offline from the ``dashscope`` wheel
(``dashscope/resources/qwen.tiktoken``, 151,643 ranks) into ``tiktoken`` with Qwen's split
pattern. Where that file cannot be had, it falls back to a documented estimate: one token per
four bytes of UTF-8, rounded up.

A prompt is counted as Qwen's ChatML template frames it (see ``prompt_tokens``):

    <|im_start|>{role}\\n{content}<|im_end|>\\n      5 tokens of framing per message
    <|im_start|>assistant\\n                          3 tokens: the generation prompt
    <|im_end|>\\n<|endoftext|>                        3 tokens: the reply's end of turn

so the API's examples count exactly as Mortar reports them (32 and 17 prompt tokens).

An image (a model with vision) counts as Qwen2.5-VL's image processor and chat template make it
(``image_tokens``): the image is resized to multiples of 28 px with its aspect ratio kept as
nearly as may be, within 3,136 to 12,845,056 pixels (``smart_resize``), and becomes one
``<|image_pad|>`` token per 28x28 px (a 2x2 merge of 14 px patches) between
``<|vision_start|>`` and ``<|vision_end|>``:

    <|vision_start|><|image_pad|> x (h/28 · w/28)<|vision_end|>     h/28 · w/28 + 2 tokens

A message with content parts counts its text parts as one text, as the template concatenates
them, plus its images.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

import orjson

logger = logging.getLogger(__name__)

QWEN_SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_SPECIAL_TOKENS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}

MESSAGE_FRAMING_TOKENS = 5
REPLY_FRAMING_TOKENS = 6
TOOLS_BLOCK_TOKENS = 3  # "<tools>"
TOOL_CALL_FRAMING_TOKENS = 2


# Qwen2.5-VL's image processor, as Qwen/Qwen2.5-VL-*-Instruct ship it (preprocessor_config.json:
# patch_size 14, merge_size 2, min_pixels 3136, max_pixels 12845056), which a model server loads.
IMAGE_FACTOR = 28  # 14 px patches, merged 2x2 into one token
IMAGE_MIN_PIXELS = 56 * 56  # 3,136
IMAGE_MAX_PIXELS = 16384 * 28 * 28  # 12,845,056
IMAGE_FRAME_TOKENS = 2  # <|vision_start|> and <|vision_end|>

ENCODE_CHUNK_CHARS = 100_000
_LAST_WORD_AFTER_SPACE = re.compile(r".*\s(?=\S)", re.DOTALL)


def _pieces(text: str, size: int) -> Iterable[str]:
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            # Cut before the last whitespace that precedes a word, so words stay whole.
            boundary = _LAST_WORD_AFTER_SPACE.match(text, start + size // 2, end)
            if boundary is not None:
                end = boundary.end() - 1
        yield text[start:end]
        start = end


def smart_resize(height: int, width: int) -> tuple[int, int]:
    """The (height, width) Qwen2.5-VL's image processor resizes an image to: multiples of 28 px,
    the aspect ratio kept as nearly as may be, within the min and max pixels (transformers'
    `smart_resize`, step for step; Python's round halves to even, as there)."""
    factor = IMAGE_FACTOR
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > IMAGE_MAX_PIXELS:
        beta = math.sqrt((height * width) / IMAGE_MAX_PIXELS)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < IMAGE_MIN_PIXELS:
        beta = math.sqrt(IMAGE_MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_tokens(width: int, height: int) -> int:
    """The prompt tokens of one image: a token per 28x28 px of it resized, and its frame."""
    resized_height, resized_width = smart_resize(height, width)
    return (resized_height // IMAGE_FACTOR) * (resized_width // IMAGE_FACTOR) + IMAGE_FRAME_TOKENS


class ImageSize(Protocol):
    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...


class QwenTokenizer:
    """Qwen's byte-level BPE through tiktoken; special-token text in content counts as text."""

    name = "qwen"

    def __init__(self, ranks_file: str):
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        self._encoding = tiktoken.Encoding(
            name="qwen",
            pat_str=QWEN_SPLIT_PATTERN,
            mergeable_ranks=load_tiktoken_bpe(ranks_file),
            special_tokens=QWEN_SPECIAL_TOKENS,
        )

    def encode(self, text: str) -> list[int]:
        if len(text) <= ENCODE_CHUNK_CHARS:
            return self._encode_piece(text)
        # tiktoken's regex engine overflows its stack on very long runs (a million spaces):
        # encode long text in pieces, cut where whitespace meets a word when possible.
        tokens: list[int] = []
        for piece in _pieces(text, ENCODE_CHUNK_CHARS):
            tokens.extend(self._encode_piece(piece))
        return tokens

    def _encode_piece(self, text: str) -> list[int]:
        try:
            return self._encoding.encode_ordinary(text)
        except BaseException as exc:  # pyo3's PanicException derives from BaseException
            if type(exc).__name__ != "PanicException":
                raise
            logger.warning("tokenizer panicked on %d characters; estimating", len(text))
            return ByteEstimateTokenizer().encode(text)

    def decode(self, tokens: Sequence[int]) -> str:
        # A cut can fall inside a multi-byte character: drop the partial tail, never emit U+FFFD.
        return self._encoding.decode_bytes(list(tokens)).decode("utf-8", errors="ignore")


class ByteEstimateTokenizer:
    """The documented fallback: one "token" per four bytes of UTF-8."""

    name = "estimate"

    def encode(self, text: str) -> list[int]:
        # Each "token" is its bytes behind a 0x01 marker, so decoding is exact.
        data = text.encode("utf-8")
        return [int.from_bytes(b"\x01" + data[i : i + 4], "big") for i in range(0, len(data), 4)]

    def decode(self, tokens: Sequence[int]) -> str:
        out = bytearray()
        for token in tokens:
            out += token.to_bytes((token.bit_length() + 7) // 8, "big")[1:]
        return out.decode("utf-8", errors="ignore")


def _qwen_ranks_file() -> str | None:
    try:
        path = resources.files("dashscope").joinpath("resources/qwen.tiktoken")
    except ModuleNotFoundError:
        return None
    return str(path) if path.is_file() else None


@functools.cache
def default_tokenizer() -> Tokenizer:
    ranks = _qwen_ranks_file()
    if ranks is None:
        logger.warning("Qwen's BPE ranks are not installed; counting tokens by estimate")
        return ByteEstimateTokenizer()
    return QwenTokenizer(ranks)


# Prompt pieces (message contents, tool definitions) whose counts are remembered: system
# prompts, tool lists and earlier turns of a conversation come back request after request.
# Only pieces up to PROMPT_CACHE_MAX_CHARS, so the cache holds at most ~16 M characters.
PROMPT_CACHE_SIZE = 1024
PROMPT_CACHE_MAX_CHARS = 16 * 1024


@dataclass(frozen=True)
class TokenCounter:
    """Counts text, prompts and replies with one tokenizer."""

    tokenizer: Tokenizer
    _remembered: Callable[[str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        remembered = functools.lru_cache(maxsize=PROMPT_CACHE_SIZE)(self.count)
        object.__setattr__(self, "_remembered", remembered)

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) if text else 0

    def count_prompt_piece(self, text: str) -> int:
        """`count`, remembered for pieces that recur across requests."""
        if not isinstance(text, str) or len(text) > PROMPT_CACHE_MAX_CHARS:
            return self.count(text)
        return self._remembered(text)

    def truncate(self, text: str, max_tokens: int) -> tuple[str, int, bool]:
        """Return the text cut to at most max_tokens tokens, its token count, and whether cut."""
        tokens = self.tokenizer.encode(text)
        if len(tokens) <= max_tokens:
            return text, len(tokens), False
        head = self.tokenizer.decode(tokens[:max_tokens])
        return head, min(self.count(head), max_tokens), True

    def tool_call_tokens(self, name: str, arguments: str) -> int:
        return self.count(name) + self.count(arguments) + TOOL_CALL_FRAMING_TOKENS

    def prompt_tokens(
        self,
        messages: Iterable[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        images: Iterable[ImageSize] = (),
    ) -> int:
        """Count a normalized conversation as the chat template frames it; `images` are the
        images of its `image_url` parts (a model with vision), whose sizes the parts don't say."""
        total = REPLY_FRAMING_TOKENS
        for message in messages:
            content = message.get("content") or ""
            if type(content) is list:  # text and image parts: the images are counted below
                content = "".join(part["text"] for part in content if part["type"] == "text")
            total += MESSAGE_FRAMING_TOKENS + self.count_prompt_piece(content)
            for call in message.get("tool_calls") or ():
                function = call["function"]
                total += self.tool_call_tokens(function["name"], function["arguments"])
        total += sum(image_tokens(image.width, image.height) for image in images)
        return total + self.tools_tokens(tools)

    def tools_tokens(self, tools: Sequence[dict[str, Any]] | None) -> int:
        """The tools block: `<tools>`, then each definition as compact JSON, one per line."""
        if not tools:
            return 0
        lines = sum(self.count_prompt_piece(orjson.dumps(tool).decode()) for tool in tools)
        return TOOLS_BLOCK_TOKENS + lines + len(tools) - 1


@functools.cache
def default_counter() -> TokenCounter:
    return TokenCounter(default_tokenizer())
