"""Unit tests of output-cap planning against the context window."""

from __future__ import annotations

import pytest

from gateway.errors import ContextLengthExceeded
from gateway.pipeline.admission import plan_output_cap

WINDOW = 4096


@pytest.mark.parametrize(
    ("prompt_tokens", "requested", "expected"),
    [
        pytest.param(32, None, 1024, id="default-1024"),
        pytest.param(17, 200, 200, id="requested-fits"),
        pytest.param(17, 4047, 4047, id="requested-fills-the-window-exactly"),
        pytest.param(17, 4048, 4047, id="requested-one-over-is-lowered"),
        pytest.param(17, 100_000, 4047, id="huge-request-lowered"),
        pytest.param(3500, None, 564, id="default-lowered-to-fit"),
        pytest.param(3040, None, 1024, id="default-fits-exactly"),
        pytest.param(3041, None, 1023, id="default-lowered-by-one"),
        pytest.param(3500, 100, 100, id="small-request-kept-near-the-end"),
        pytest.param(4000, None, 64, id="exactly-64-left"),
        pytest.param(4000, 1, 1, id="exactly-64-left-small-request"),
    ],
)
def test_it_plans_the_output_cap(prompt_tokens: int, requested: int | None, expected: int) -> None:
    assert (
        plan_output_cap(prompt_tokens=prompt_tokens, requested=requested, context_window=WINDOW)
        == expected
    )


def test_it_refuses_when_63_tokens_would_be_left() -> None:
    with pytest.raises(ContextLengthExceeded) as raised:
        plan_output_cap(prompt_tokens=4001, requested=None, context_window=WINDOW)

    error = raised.value
    assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "messages")
    assert error.message == (
        "The prompt is 4001 tokens; with 32 tokens of template overhead only 63 of the model's "
        "4096-token context window are left for the reply, fewer than 64. Start a new "
        "conversation or send fewer messages."
    )


def test_it_refuses_even_a_small_request_when_63_tokens_would_be_left() -> None:
    with pytest.raises(ContextLengthExceeded):
        plan_output_cap(prompt_tokens=4001, requested=10, context_window=WINDOW)


def test_a_prompt_over_the_window_reports_zero_tokens_left() -> None:
    with pytest.raises(ContextLengthExceeded) as raised:
        plan_output_cap(prompt_tokens=5000, requested=None, context_window=WINDOW)

    assert "only 0 of the model's 4096-token context window" in raised.value.message


def test_a_smaller_window_plans_against_its_own_size() -> None:
    assert plan_output_cap(prompt_tokens=100, requested=None, context_window=512) == 380
    with pytest.raises(ContextLengthExceeded):
        plan_output_cap(prompt_tokens=417, requested=None, context_window=512)
