"""The benchmark harness's own pieces: the one percentile bench/ reports, the Messages
scenarios (their requests, which targets they are measured on, their verdict and report), the
summary of a profile, and `python -m bench`, the one way in to every benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS
from bench.harness.cli import summarize
from bench.harness.constants import BENCH
from bench.harness.markdown import NONE
from bench.harness.profile_summary import summarize as summarize_profile
from bench.harness.report import render
from bench.harness.scenarios import SCENARIOS, request_body, request_headers
from bench.harness.stats import percentile, summary_ms
from bench.harness.targets import Target
from bench.harness.verdicts import messages_check


def test_a_percentile_is_the_nearest_rank_never_an_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0  # the mean of the middle two is 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 51) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 75) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 76) == 4.0


def test_it_ranks_the_values_whatever_their_order() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([30.0, 10.0, 20.0, 40.0, 50.0], 90) == 50.0


def test_the_tails_of_a_hundred_values() -> None:
    values = [float(v) for v in range(100, 0, -1)]

    assert percentile(values, 50) == 50.0
    assert percentile(values, 90) == 90.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 99.9) == 100.0


def test_the_edges_are_the_least_and_the_greatest() -> None:
    values = [7.0, 3.0, 9.0, 1.0]

    assert percentile(values, 0) == 1.0
    assert percentile(values, 1) == 1.0
    assert percentile(values, 100) == 9.0
    assert percentile([5.0], 0) == percentile([5.0], 50) == percentile([5.0], 100) == 5.0


def test_no_values_have_no_percentile() -> None:
    assert percentile([], 50) is None


def test_a_summary_is_in_milliseconds_with_its_count() -> None:
    assert summary_ms([0.003, 0.001, 0.002, 0.0105]) == {
        "n": 4,
        "p50_ms": 2.0,
        "p90_ms": 10.5,
        "p99_ms": 10.5,
        "p999_ms": 10.5,
        "max_ms": 10.5,
    }
    assert summary_ms([]) == {
        "n": 0,
        "p50_ms": None,
        "p90_ms": None,
        "p99_ms": None,
        "p999_ms": None,
        "max_ms": None,
    }


SCENARIO = {scenario.name: scenario for scenario in SCENARIOS}


def test_a_messages_request_has_anthropics_shape_and_the_mocks_directive() -> None:
    body = json.loads(request_body("bench-model", stream=True, surface="messages"))

    assert body == {
        "model": "bench-model",
        "max_tokens": 200,
        "system": "You are a concise assistant for an inference platform.",
        "messages": [{"role": "user", "content": "What does max_tokens limit? [mock chunks=20]"}],
        "stream": True,
    }
    assert request_headers("mk-1", "messages") == {
        "x-api-key": "mk-1",
        "anthropic-version": "2023-06-01",
    }
    assert request_headers("mk-1") == {"Authorization": "Bearer mk-1"}
    assert request_headers("") == {}


def test_only_targets_serving_messages_are_measured_on_it_at_their_route() -> None:
    direct = Target("direct", "http://127.0.0.1:1/v1/chat/completions", "", "m", None)
    mortar = Target(
        "mortar",
        "http://127.0.0.1:2/v1/chat/completions",
        "mk",
        "m",
        None,
        "http://127.0.0.1:2",
        surfaces={"chat", "messages"},
    )

    assert not direct.measured_on(SCENARIO["messages-json-32"])
    assert direct.measured_on(SCENARIO["json-32"])
    assert mortar.measured_on(SCENARIO["messages-stream-32"])
    assert mortar.url_for(SCENARIO["messages-stream-32"]) == "http://127.0.0.1:2/v1/messages"
    assert mortar.url_for(SCENARIO["stream-32"]) == "http://127.0.0.1:2/v1/chat/completions"


def _run(target: str, scenario: str, round_: int, rps: float) -> dict[str, Any]:
    result = {
        "rps": rps,
        "requests": int(rps * 10),
        "latency_p50_ms": 40.0,
        "failed": 0,
        "wall_s": 10.0,
        "cpu_s": {target: 9.0, "mock": 3.0, "postgres": 1.0, "redis": 0.5},
        "loadgen_cpu_s": 1.5,
        "cores_busy": {"cpu0": 1.0, "cpu1": 0.9},
        "unexplained_cpu_s": 0.4,
    }
    return {"round": round_, "scenario": scenario, "target": target, "result": result}


def _messages_runs() -> list[dict[str, Any]]:
    rates = {
        ("mortar", "json-32"): (1000.0, 1100.0, 900.0),
        ("mortar", "messages-json-32"): (950.0, 1000.0, 800.0),
        ("mortar", "stream-32"): (800.0, 800.0, 800.0),
        ("mortar", "messages-stream-32"): (700.0, 720.0, 640.0),
        ("direct", "json-32"): (9000.0, 9000.0, 9000.0),
    }
    return [
        _run(target, scenario, round_, rps)
        for (target, scenario), by_round in rates.items()
        for round_, rps in enumerate(by_round)
    ]


def test_messages_are_judged_against_their_chat_completions_twin() -> None:
    json_row, stream_row = messages_check(_messages_runs())

    assert json_row == {
        "target": "mortar",
        "scenario": "messages-json-32",
        "chat": 1000.0,
        "messages": 950.0,
        "ratio": 0.95,
        "round_ratios": [0.95, 0.91, 0.89],
        "verdict": "met",
    }
    assert stream_row["ratio"] == 700.0 / 800.0
    assert stream_row["verdict"] == "NOT met"


def test_the_report_puts_messages_beside_chat_completions() -> None:
    report = {
        "finished_at": "2026-12-06T20:00:00+00:00",
        "quick": True,
        "rounds": 3,
        "duration_s": 4.0,
        "argv": ["--quick"],
        "machine": dict.fromkeys(
            ("nproc", "cpu_model", "memory_gib", "kernel", "python", "git", "django", "uvicorn"),
            "x",
        )
        | {"wrk": "wrk"},
        "baseline": None,
        "background_cores_before": 0.0,
        "runs": _messages_runs(),
    }
    text = render(summarize(report))

    assert "## Messages beside chat completions (within 10% of their throughput, or better)" in text
    assert (
        "| Mortar | Non-streaming, 32 conns, req/s | 1,000 | 950 | 0.95\u00d7 (0.95, 0.91, 0.89) "
        "| met |" in text
    )
    assert (
        "| Mortar | 20-chunk streams, 32 conns, streams/s | 800 | 700 "
        "| 0.88\u00d7 (0.88, 0.90, 0.80) | NOT met |" in text
    )
    # direct serves no Messages: its column and the comparison with it are empty.
    assert f"| Messages, non-streaming, 32 conns | req/s | {NONE} | 950 | {NONE} |" in text
    assert "1,000 slow streams" not in text.split("## Targets")[0]


def test_without_messages_measured_there_is_nothing_to_judge() -> None:
    assert messages_check([_run("mortar", "json-32", 0, 1000.0)]) == []


def test_a_profile_is_summed_up_by_where_its_working_samples_go(tmp_path: Path) -> None:
    profile = tmp_path / "profile-messages-stream-32.txt"
    profile.write_text(
        "run (uvicorn/server.py:1);relay_chunks (gateway/relay/stream.py:10) 60\n"
        "run (uvicorn/server.py:1);relay_chunks (gateway/relay/stream.py:10);"
        "MessageStream.feed (gateway/surfaces/messages/translate/stream.py:80) 30\n"
        "_worker (concurrent/futures/thread.py:81) 10\n"
    )

    text = summarize_profile(profile)

    assert "100 samples; 90 working (90%), the rest waiting." in text
    assert "| relay, chunk encoding, the run and its sink | 66.7% |" in text
    assert "| Messages: Anthropic's shapes in and out (validation, translation) | 33.3% |" in text
    assert "| wait: idle worker thread (queue.get) | 10.0% |" in text


def _bench_modules() -> list[Path]:
    """bench/'s own modules, not those of the virtual environment it installs LiteLLM in."""
    return [
        path
        for path in BENCH.rglob("*.py")
        if not any(part.startswith(".") for part in path.relative_to(BENCH).parts)
    ]


def test_every_program_in_bench_is_a_command_of_python_m_bench() -> None:
    programs = {
        ".".join(path.relative_to(BENCH.parent).with_suffix("").parts)
        for path in _bench_modules()
        if "\ndef main(argv: list[str]) -> None:" in path.read_text()
    }

    assert programs == {command.module for command in COMMANDS}
    assert len({command.name for command in COMMANDS}) == len(COMMANDS)


def test_python_m_bench_is_the_one_way_in() -> None:
    modules = [path for path in _bench_modules() if path.name != "__init__.py"]
    names = [path.name for path in modules]

    assert sorted({name for name in names if names.count(name) > 1}) == []
    assert [path for path in modules if path.name == "__main__.py"] == [BENCH / "__main__.py"]
    assert [path for path in modules if '__name__ == "__main__"' in path.read_text()] == []


def test_help_lists_every_command_and_each_command_has_its_own() -> None:
    """Run as a user runs them: a process each, from the repository's root."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    def bench(*argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "bench", *argv],
            cwd=BENCH.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    overview = bench("--help")
    helps = {command.name: bench(*command.words, "--help") for command in COMMANDS}
    try:
        text, _ = overview.communicate(timeout=60)
        outcomes = {name: (p.communicate(timeout=90), p.returncode) for name, p in helps.items()}
    finally:
        for process in [overview, *helps.values()]:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert overview.returncode == 0
    words = " ".join(text.split())
    for command in COMMANDS:
        assert f"\n  {command.name}\n" in text
        assert " ".join(command.question.split()) in words
    for name, ((out, err), returncode) in outcomes.items():
        assert returncode == 0, (name, err[-2000:])
        assert out.startswith(f"usage: python -m bench {name} "), (name, out[:200])
