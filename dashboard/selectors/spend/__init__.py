"""Spend and usage: who spends (organization, key, end user, model), over time, what caching
saved, which errors, and how long runs took.

Sums come from the same two sources as the Overview's (`dashboard/selectors/overview.py`): the
hourly rollups for the hours before the one of their last refresh, and the runs themselves from
that hour on (`fresh_since`), so the two pages agree and a run shows the moment it is stored.
The rollups are read through their usage breakdowns (telemetry/services/breakdowns.py: the same
sums per breakdown, by the hour and by the day): a range's whole days from the daily ones, its
other hours from the hourly ones — or, for end users, from the rollups themselves.
The two grouped queries are put together in SQL (`UNION ALL`, then grouped again), so a
breakdown by a dimension with many values (end users) is sorted and cut in the database and
never summed in Python. The page reads its five breakdowns in one query (`usage_by_each`: the
fresh runs grouped once, for all of them) and its totals with its charts' totals per bucket
(`spend_totals_and_charts`): at a high write rate the fresh runs are most of its time.

Errors by code are counted from the runs (the rollups keep no code), through the
`run_error_accepted` partial index: only the runs that are errors are in it. The latency and
TTFT histograms, like the Overview's percentiles, describe the range's latest
`PERCENTILE_SAMPLE` completed runs.

Cache savings are what cached prompt tokens would have cost at the model's input price, less
what they cost at its cached-input price, at the catalog's prices today.
"""

from dashboard.selectors.spend.breakdowns import TOP, spend_totals, usage_by, usage_by_each
from dashboard.selectors.spend.charts import (
    CHART_SERIES,
    Chart,
    spend_chart,
    spend_charts,
    spend_totals_and_charts,
)
from dashboard.selectors.spend.errors_and_latency import (
    BIN_EDGES_MS,
    Bin,
    ErrorCount,
    errors_by_code,
    histogram,
)
from dashboard.selectors.spend.sums import DIMENSIONS, SpendFilters, Usage

__all__ = [
    "BIN_EDGES_MS",
    "CHART_SERIES",
    "DIMENSIONS",
    "TOP",
    "Bin",
    "Chart",
    "ErrorCount",
    "SpendFilters",
    "Usage",
    "errors_by_code",
    "histogram",
    "spend_chart",
    "spend_charts",
    "spend_totals",
    "spend_totals_and_charts",
    "usage_by",
    "usage_by_each",
]
