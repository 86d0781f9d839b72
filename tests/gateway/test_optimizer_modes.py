"""The optimizer's modes (`X-Mortar-Optimize`) and its report (`X-Mortar-Optimizer`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gateway.optimizer import OptimizerPlan, OptimizerReport, optimize, resolve_plan

LOSSLESS = ("json-compact",)
ALL_PASSES = ("json-compact", "json-tool-blocks", "collapse-spaces")

PRETTY = '{\n  "city": "Paris",\n  "temp": 21.0\n}'  # 37 bytes; compact: 28
TABLE = "id    name\n1     Ada  Lovelace\n"  # 31 bytes; collapsed: 23
FENCED = 'Result:\n```json\n{ "ok": true }\n```\n'  # 35 bytes; compacted: 32


def prompt() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris?"},  # 17 bytes
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{ "city": "Paris" }'},  # 19
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": PRETTY},
        {"role": "tool", "tool_call_id": "call_2", "content": TABLE},
        {"role": "tool", "tool_call_id": "call_3", "content": FENCED},
    ]


def clock(*microseconds: int) -> Callable[[], int]:
    """A perf_counter_ns stand-in that returns the given instants, in microseconds."""
    return iter([us * 1000 for us in microseconds]).__next__


# deployment, organization default, X-Mortar-Optimize, expected plan
MODE_TABLE = [
    ("off", "on", (), OptimizerPlan("off")),
    ("off", "off", (), OptimizerPlan("off")),
    ("off", "on", ("on",), OptimizerPlan("off")),
    ("off", "off", ("json-tool-blocks", "collapse-spaces"), OptimizerPlan("off")),
    ("on", "on", (), OptimizerPlan("on", LOSSLESS)),
    ("on", "off", (), OptimizerPlan("off")),
    ("on", "on", ("off",), OptimizerPlan("off")),
    ("on", "off", ("on",), OptimizerPlan("on", LOSSLESS)),
    ("on", "on", ("on",), OptimizerPlan("on", LOSSLESS)),
    ("on", "off", ("json-tool-blocks",), OptimizerPlan("on", ("json-compact", "json-tool-blocks"))),
    ("on", "on", ("collapse-spaces",), OptimizerPlan("on", ("json-compact", "collapse-spaces"))),
    ("on", "on", ("collapse-spaces", "json-tool-blocks"), OptimizerPlan("on", ALL_PASSES)),
    (
        "on",
        "on",
        ("on", "collapse-spaces"),
        OptimizerPlan("on", ("json-compact", "collapse-spaces")),
    ),
    (
        "on",
        "on",
        ("json-tool-blocks", "json-tool-blocks"),
        OptimizerPlan("on", ("json-compact", "json-tool-blocks")),
    ),
    ("shadow", "on", (), OptimizerPlan("shadow", LOSSLESS)),
    ("shadow", "off", (), OptimizerPlan("off")),
    ("shadow", "on", ("off",), OptimizerPlan("off")),
    ("shadow", "off", ("on",), OptimizerPlan("shadow", LOSSLESS)),
    ("shadow", "off", ("json-tool-blocks", "collapse-spaces"), OptimizerPlan("shadow", ALL_PASSES)),
]


@pytest.mark.parametrize(("deployment", "organization", "requested", "expected"), MODE_TABLE)
def test_the_mode_table(
    deployment: str, organization: str, requested: tuple[str, ...], expected: OptimizerPlan
) -> None:
    plan = resolve_plan(
        deployment_mode=deployment, organization_default=organization, requested=requested
    )

    assert plan == expected


@pytest.mark.parametrize(
    ("deployment", "organization", "requested", "message"),
    [
        ("auto", "on", (), "deployment"),
        ("on", "shadow", (), "organization"),
        ("on", "on", ("squash",), "squash"),
        ("on", "on", ("off", "collapse-spaces"), "combined"),
    ],
)
def test_it_refuses_inputs_the_header_parser_would_have_refused(
    deployment: str, organization: str, requested: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_plan(
            deployment_mode=deployment, organization_default=organization, requested=requested
        )


def test_on_mode_sends_the_optimized_prompt_and_reports_it() -> None:
    messages = prompt()
    before = copy.deepcopy(messages)

    used, report = optimize(
        messages,
        deployment_mode="on",
        organization_default="on",
        requested=(),
        clock=clock(1_000, 1_212),
    )

    assert messages == before
    assert used[2]["content"] == '{"city":"Paris","temp":21.0}'
    assert used[1]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    assert used[3] is messages[3]
    assert used[4] is messages[4]
    # 17 + 19 + 37 + 31 + 35 bytes; 3 + 9 removed.
    assert report.header() == (
        "ruleset=2; mode=on; bytes=139; saved=12; passes=json-compact/2; elapsed_us=212"
    )


def test_on_mode_with_every_opt_in_reports_each_pass_in_pass_order() -> None:
    used, report = optimize(
        prompt(),
        deployment_mode="on",
        organization_default="off",
        requested=("collapse-spaces", "json-tool-blocks"),
        clock=clock(50, 127),
    )

    assert used[3]["content"] == "id name\n1 Ada Lovelace\n"
    assert used[4]["content"] == 'Result:\n```json\n{"ok":true}\n```\n'
    assert report.header() == (
        "ruleset=2; mode=on; bytes=139; saved=23; "
        "passes=json-compact/2,json-tool-blocks/1,collapse-spaces/1; elapsed_us=77"
    )
    assert report.as_dict() == {
        "ruleset": 2,
        "mode": "on",
        "bytes": 139,
        "saved": 23,
        "passes": [
            {"name": "json-compact", "count": 2},
            {"name": "json-tool-blocks", "count": 1},
            {"name": "collapse-spaces", "count": 1},
        ],
        "elapsed_us": 77,
    }


def test_shadow_mode_uses_the_prompt_as_sent_and_reports_what_would_be_saved() -> None:
    messages = prompt()
    before = copy.deepcopy(messages)

    used, report = optimize(
        messages,
        deployment_mode="shadow",
        organization_default="on",
        requested=("json-tool-blocks",),
        clock=clock(0, 9),
    )

    assert used is messages
    assert messages == before
    assert report.header() == (
        "ruleset=2; mode=shadow; bytes=139; saved=15; "
        "passes=json-compact/2,json-tool-blocks/1; elapsed_us=9"
    )


@pytest.mark.parametrize(
    ("deployment", "organization", "requested"),
    [("off", "on", ("on",)), ("on", "on", ("off",)), ("shadow", "off", ())],
)
def test_off_runs_nothing_and_reports_only_the_ruleset_and_mode(
    deployment: str, organization: str, requested: tuple[str, ...]
) -> None:
    messages = prompt()

    def no_clock() -> int:
        raise AssertionError("an off optimizer must not even time itself")

    used, report = optimize(
        messages,
        deployment_mode=deployment,
        organization_default=organization,
        requested=requested,
        clock=no_clock,
    )

    assert used is messages
    assert report == OptimizerReport(mode="off")
    assert report.header() == "ruleset=2; mode=off"
    assert report.as_dict() == {"ruleset": 2, "mode": "off"}


def test_a_prompt_with_nothing_to_remove_reports_no_passes() -> None:
    messages = [
        {"role": "user", "content": "héllo"},
        {"role": "tool", "tool_call_id": "c", "content": "[1,2]"},
    ]

    used, report = optimize(
        messages, deployment_mode="on", organization_default="on", requested=(), clock=clock(0, 3)
    )

    assert used == messages
    assert report.header() == "ruleset=2; mode=on; bytes=11; saved=0; passes=; elapsed_us=3"
    assert report.as_dict()["passes"] == []


def test_the_report_renders_the_spec_example_exactly() -> None:
    report = OptimizerReport(
        mode="on",
        bytes=541,
        saved=77,
        passes=(("json-compact", 1), ("json-tool-blocks", 1)),
        elapsed_us=212,
    )

    assert report.header() == (
        "ruleset=2; mode=on; bytes=541; saved=77; passes=json-compact/1,json-tool-blocks/1; "
        "elapsed_us=212"
    )


def test_bytes_count_utf8_of_contents_and_arguments() -> None:
    messages = [
        {"role": "user", "content": "é😀"},  # 2 + 4 bytes
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "n", "arguments": '["日"]'}}
            ],  # 7 bytes
        },
    ]

    _, report = optimize(
        messages,
        deployment_mode="shadow",
        organization_default="on",
        requested=(),
        clock=clock(0, 0),
    )

    assert report.bytes == 13
    assert report.saved == 0
