"""`core` is the bottom layer: it names no route of the API and no surface of it.

Routes, their prefixes, the headers they read and the envelopes they answer in are told to core
by its callers (config mounts the dispatch, CORS and tracing; a router declares its envelope).
A word below, in any of core's modules — code, comment or docstring — is a product's word
leaking down. Generic words stay allowed: the backplane's pub/sub "messages", an error's
"message".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"

# Each a product word, matched without regard to case.
PRODUCT_WORDS = {
    "an API route": r"/v1\b",
    "the chat completions route": r"chat/completions|chat\.completion|chat completions?\b",
    "the Messages route": r"/messages\b|messages (?:api|route)\b|count_tokens",
    "Anthropic": r"anthropic",
    "OpenAI": r"openai",
    "a surface": r"surface",
    "a surface's run ids": r"chatcmpl|\bmsg_",
}


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_has_modules_to_check() -> None:
    names = {path.relative_to(CORE).as_posix() for path in core_modules()}
    assert {"errors.py", "http/dispatch.py", "http/cors.py", "tracing.py", "ids.py"} <= names


@pytest.mark.parametrize("word", PRODUCT_WORDS, ids=list(PRODUCT_WORDS))
def test_no_core_module_names(word: str) -> None:
    pattern = re.compile(PRODUCT_WORDS[word], re.IGNORECASE)
    found = [
        f"{path.relative_to(CORE)}:{number}: {line.strip()}"
        for path in core_modules()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("line", "word"),
    [
        ('API_PREFIX = "/v1/"', "an API route"),
        ("# Anthropic's envelope on the Messages route", "Anthropic"),
        ("the OpenAI-compatible routes", "OpenAI"),
        ('MESSAGES_PATH = "/v1/messages"', "the Messages route"),
        ("raise UnsupportedSurface(...)", "a surface"),
        ("One pipeline for both API surfaces", "a surface"),
        ('COMPLETION_ID_PREFIX = "chatcmpl-"', "a surface's run ids"),
        ("`POST /v1/chat/completions`", "the chat completions route"),
    ],
)
def test_the_words_are_caught(line: str, word: str) -> None:
    assert re.search(PRODUCT_WORDS[word], line, re.IGNORECASE)


@pytest.mark.parametrize(
    "line",
    [
        "async for message in pubsub.listen():",  # the backplane's pub/sub messages
        "self.message = message",
        "Publish messages to every worker",
        'code = "unsupported_parameter"',
    ],
)
def test_generic_words_pass(line: str) -> None:
    assert not any(re.search(word, line, re.IGNORECASE) for word in PRODUCT_WORDS.values())
