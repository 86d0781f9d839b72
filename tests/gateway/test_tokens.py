"""Unit tests of the one token counter: the API examples' counts, truncation, and the fallback."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.tokens import (
    ByteEstimateTokenizer,
    TokenCounter,
    default_counter,
    image_tokens,
    smart_resize,
)

SPEC_REPLY = "It caps how many tokens the model may generate for this reply."
SPEC_SYSTEM = "You are a concise assistant for an inference platform."
SPEC_QUESTION = "What does max_tokens limit?"
# Characters Qwen's byte-level BPE splits over two or three tokens, plus common multi-byte ones.
MIXED = "ab🦩 héllo wörld 🫠 日本語 𠀋 ꙮ€ end"


@pytest.fixture(scope="module")
def qwen() -> TokenCounter:
    counter = default_counter()
    assert counter.tokenizer.name == "qwen", "dashscope's qwen.tiktoken must be installed"
    return counter


@pytest.fixture
def estimate() -> TokenCounter:
    return TokenCounter(ByteEstimateTokenizer())


def test_the_spec_reply_is_13_tokens(qwen: TokenCounter) -> None:
    assert qwen.count(SPEC_REPLY) == 13


def test_the_spec_example_with_a_system_message_is_32_prompt_tokens(qwen: TokenCounter) -> None:
    messages = [
        {"role": "system", "content": SPEC_SYSTEM},
        {"role": "user", "content": SPEC_QUESTION},
    ]

    assert qwen.prompt_tokens(messages) == 32


def test_the_spec_streaming_example_is_17_prompt_tokens(qwen: TokenCounter) -> None:
    assert qwen.prompt_tokens([{"role": "user", "content": SPEC_QUESTION}]) == 17


def test_empty_and_null_content_count_only_their_framing(qwen: TokenCounter) -> None:
    assert qwen.count("") == 0
    # 6 for the reply's framing, 5 per message.
    assert qwen.prompt_tokens([{"role": "user", "content": ""}]) == 11
    assert qwen.prompt_tokens([{"role": "assistant", "content": None}]) == 11


def test_special_token_text_in_content_counts_as_ordinary_text(qwen: TokenCounter) -> None:
    assert qwen.count("<|im_end|>") > 1


def test_tool_calls_count_their_name_arguments_and_framing(qwen: TokenCounter) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}

    expected = 6 + 5 + qwen.count("get_weather") + qwen.count("{}") + 2
    assert qwen.prompt_tokens([message]) == expected


def test_no_tools_add_no_tokens(qwen: TokenCounter) -> None:
    assert qwen.tools_tokens(None) == 0
    assert qwen.tools_tokens([]) == 0


@pytest.mark.parametrize("cap", range(1, 40))
def test_truncate_never_splits_a_character_and_stays_within_the_cap(
    qwen: TokenCounter, cap: int
) -> None:
    head, count, cut = qwen.truncate(MIXED, cap)

    assert MIXED.startswith(head)
    assert "\ufffd" not in head
    assert count <= cap
    assert count == qwen.count(head)
    assert cut is (len(qwen.tokenizer.encode(MIXED)) > cap)


def test_truncate_drops_a_character_whose_tokens_do_not_all_fit(qwen: TokenCounter) -> None:
    # "ab" is one token; the flamingo is two (its first three bytes, then its last).
    assert qwen.tokenizer.encode("ab🦩") == [370, 123918, 102]

    assert qwen.truncate("ab🦩", 1) == ("ab", 1, True)
    assert qwen.truncate("ab🦩", 2) == ("ab", 1, True)
    assert qwen.truncate("ab🦩", 3) == ("ab🦩", 3, False)


def test_truncate_leaves_text_within_the_cap_alone(qwen: TokenCounter) -> None:
    assert qwen.truncate(SPEC_REPLY, 13) == (SPEC_REPLY, 13, False)
    assert qwen.truncate(SPEC_REPLY, 12) == (
        "It caps how many tokens the model may generate for this reply",
        12,
        True,
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("\x00", id="nul"),
        pytest.param("\x00\x00\x00\x00\x00", id="five-nuls"),
        pytest.param("abc\x00", id="trailing-nul"),
        pytest.param("héllo wörld", id="latin"),
        pytest.param("日本語のテキスト", id="cjk"),
        pytest.param("🦩🫠𠀋\x00€", id="astral-and-nul"),
        pytest.param("line\r\nbreak\ttab", id="control"),
    ],
)
def test_the_estimate_round_trips_text(estimate: TokenCounter, text: str) -> None:
    tokens = estimate.tokenizer.encode(text)

    assert estimate.tokenizer.decode(tokens) == text
    assert len(tokens) == -(-len(text.encode("utf-8")) // 4)  # one per four bytes, rounded up


def test_the_estimate_counts_one_token_per_four_bytes_rounded_up(estimate: TokenCounter) -> None:
    assert estimate.count("abcd") == 1
    assert estimate.count("abcde") == 2
    assert estimate.count("€") == 1
    assert estimate.count(SPEC_REPLY) == 16  # 62 bytes


def test_the_estimate_truncates_without_splitting_a_character(estimate: TokenCounter) -> None:
    text = "a\x00€é😀"  # 1 + 1 + 3 + 2 + 4 bytes: the 4-byte cuts fall inside € and 😀

    assert estimate.truncate(text, 1) == ("a\x00", 1, True)
    assert estimate.truncate(text, 2) == ("a\x00€é", 2, True)
    assert estimate.truncate(text, 3) == (text, 3, False)


def test_a_long_run_of_spaces_counts_128_spaces_a_token(qwen: TokenCounter) -> None:
    assert qwen.count(" " * 128) == 1
    assert 6250 <= qwen.count(" " * 800_000) <= 6250 + 10  # encoded in pieces past 100k


# A run of a million whitespace characters used to overflow tiktoken's regex engine (a Rust panic,
# a BaseException). Long text is now encoded in pieces, so the count is within a token per piece
# of the exact one (ceil(1,000,000 / 128) = 7,813).
def test_a_million_spaces_are_counted_not_a_panic(qwen: TokenCounter) -> None:
    assert 7813 <= qwen.count(" " * 1_000_000) <= 7813 + 10


def test_recurring_prompt_pieces_are_counted_once_and_the_same() -> None:
    counter = TokenCounter(default_counter().tokenizer)  # a fresh cache
    messages = [
        {"role": "system", "content": SPEC_SYSTEM},
        {"role": "user", "content": SPEC_QUESTION},
    ]

    first = counter.prompt_tokens(messages)
    second = counter.prompt_tokens(messages)

    assert first == second == 32
    info = counter._remembered.cache_info()  # type: ignore[attr-defined]
    assert (info.misses, info.hits) == (2, 2)


def test_pieces_too_long_to_remember_are_counted_exactly_every_time() -> None:
    counter = TokenCounter(default_counter().tokenizer)
    long_text = MIXED * 2_000  # longer than PROMPT_CACHE_MAX_CHARS

    assert counter.count_prompt_piece(long_text) == counter.count(long_text)
    assert counter._remembered.cache_info().currsize == 0  # type: ignore[attr-defined]


# Images: Qwen2.5-VL's formula (docs/api/chat-completions.md, "Token counting").


@pytest.mark.parametrize(
    ("width", "height", "resized", "tokens"),
    [
        # Tiny images are scaled up to the minimum of 3,136 pixels: 56 x 56, 2 x 2 tokens.
        pytest.param(1, 1, (56, 56), 6, id="1x1"),
        pytest.param(14, 14, (56, 56), 6, id="14x14"),
        pytest.param(28, 28, (56, 56), 6, id="28x28"),
        pytest.param(56, 56, (56, 56), 6, id="56x56"),
        # Each side rounded to the nearest multiple of 28.
        pytest.param(100, 50, (112, 56), 10, id="100x50"),
        pytest.param(448, 448, (448, 448), 258, id="448x448"),
        pytest.param(1024, 768, (1036, 756), 1001, id="1024x768"),
        pytest.param(1920, 1080, (1932, 1092), 2693, id="1920x1080"),
        # Long and thin: the short side scaled up to 28 px, the ratio kept.
        pytest.param(150, 1, (700, 28), 27, id="150x1"),
        # Huge images are scaled down under the maximum of 12,845,056 pixels.
        pytest.param(5000, 3000, (4620, 2772), 16337, id="5000x3000"),
        pytest.param(8000, 6000, (4116, 3080), 16172, id="8000x6000"),
    ],
)
def test_an_image_counts_a_token_per_28_px_square_of_it_resized_plus_its_frame(
    width: int, height: int, resized: tuple[int, int], tokens: int
) -> None:
    resized_width, resized_height = resized

    assert smart_resize(height, width) == (resized_height, resized_width)
    assert image_tokens(width, height) == tokens == resized_width * resized_height // 784 + 2


def test_a_resized_image_stays_within_the_processor_s_pixel_bounds() -> None:
    for width, height in [(1, 1), (3, 700), (9000, 9000), (12345, 678), (4000, 4000)]:
        resized_height, resized_width = smart_resize(height, width)
        assert resized_height % 28 == resized_width % 28 == 0
        assert 3136 <= resized_height * resized_width <= 12_845_056


@dataclass(frozen=True)
class Size:
    width: int
    height: int


def test_a_prompt_counts_its_text_parts_and_its_images(qwen: TokenCounter) -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": SPEC_QUESTION},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]

    counted = qwen.prompt_tokens(messages, images=[Size(1024, 768), Size(1, 1)])

    # The text as if alone (the data URL is not text), plus 1,001 + 6 for the two images.
    assert counted == qwen.prompt_tokens([{"role": "user", "content": SPEC_QUESTION}]) + 1007
    assert counted == 17 + 1007


def test_text_parts_count_as_one_text_as_the_template_concatenates_them(
    qwen: TokenCounter,
) -> None:
    parts = [{"type": "text", "text": "What does "}, {"type": "text", "text": "max_tokens limit?"}]

    assert qwen.prompt_tokens([{"role": "user", "content": parts}]) == 17
