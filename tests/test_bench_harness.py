"""The benchmark harness's own arithmetic: the one percentile bench/ reports."""

from __future__ import annotations

from bench.harness.stats import percentile, summary_ms


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
