"""The benchmark's "Beyond one core": one worker against two, and what one core serves."""

from __future__ import annotations

from typing import Any

from bench.harness.cli import summarize
from bench.harness.metrics import TIMES
from bench.harness.mortar import TWO_WORKERS
from bench.harness.report import render
from bench.harness.scaling import per_core, scaling


def _wrk_run(target: str, scenario: str, round_: int, rps: float, **extra: Any) -> dict[str, Any]:
    result = {
        "rps": rps,
        "requests": int(rps * 10),
        "latency_p50_ms": 50.0,
        "failed": 0,
        "wall_s": 10.0,
        "cpu_s": {target: 9.0, "mock": 3.0, "postgres": 1.0, "redis": 0.5},
        "loadgen_cpu_s": 1.5,
        "cores_busy": {"cpu0": 1.0, "cpu1": 0.9},
        "unexplained_cpu_s": 0.4,
        "per_request": {
            "mortar_cpu_ms": 2.0,
            "postgres_cpu_ms": 0.2,
            "redis_cpu_ms": 0.1,
            "pg_sessions": 0.0,
            "pg_rows_inserted": 3.0,
            "redis_commands": {"xadd": 7.0},
        },
        **extra,
    }
    return {"round": round_, "scenario": scenario, "target": target, "result": result}


def _runs(*, two_workers: bool) -> list[dict[str, Any]]:
    runs = []
    for round_, (one, two) in enumerate([(400.0, 600.0), (500.0, 550.0)]):
        runs.append(_wrk_run("mortar", "json-32", round_, one))
        if two_workers:
            runs.append(
                _wrk_run(TWO_WORKERS, "json-32", round_, two, process_cpu_s=[6.0, 3.0, 0.0])
            )
    return runs


def _report(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "finished_at": "2026-12-02T13:00:00+00:00",
        "quick": False,
        "rounds": 2,
        "duration_s": 10.0,
        "argv": ["--no-litellm"],
        "machine": {
            key: "x"
            for key in ("nproc", "cpu_model", "memory_gib", "kernel", "python", "git", "django")
        }
        | {"uvicorn": "x", "wrk": "wrk"},
        "baseline": None,
        "background_cores_before": 0.0,
        "runs": runs,
    }


def test_scaling_compares_the_medians_and_each_round() -> None:
    [row] = scaling(_runs(two_workers=True))

    assert row["scenario"] == "json-32"
    assert row["one"]["rps"] == 450.0
    assert row["two"]["rps"] == 575.0
    assert round(row["ratio"], 4) == round(575 / 450, 4)
    assert row["round_ratios"] == [1.5, 1.1]
    assert row["two"]["busiest_worker_shares"] == [0.67, 0.67]
    assert row["one"]["busiest_worker_shares"] == []
    assert row["two"]["mortar_cores"] == 0.9
    assert row["two"]["other_cores"] == 0.6  # mock 3 + Postgres 1 + Redis 0.5 + load 1.5 over 10 s


def test_it_has_no_scaling_rows_without_a_two_worker_mortar() -> None:
    assert scaling(_runs(two_workers=False)) == []


def test_per_core_is_a_thousand_over_the_cpu_per_request() -> None:
    assert per_core(_runs(two_workers=True)) == {"json_rps": 500.0}


def test_the_report_gives_two_workers_their_own_table_not_a_column() -> None:
    text = render(summarize(_report(_runs(two_workers=True))))

    assert "## Beyond one core" in text
    assert f"| Non-streaming, 32 conns, req/s | 450 | 575 | 1.28{TIMES} (1.50, 1.10) |" in text
    main_table_header = next(line for line in text.splitlines() if line.startswith("| Measure |"))
    assert "2-workers" not in main_table_header


def test_a_report_without_two_workers_renders_without_their_table() -> None:
    text = render(summarize(_report(_runs(two_workers=False))))

    assert "Mortar@2-workers" not in text
    assert "Per core of Mortar's own CPU" in text
