"""The example alert rules and Grafana dashboard in docs/operating/ stay true to Mortar.

The rules file must be a Prometheus rules file (groups of alerting rules), the dashboard a
Grafana dashboard whose panels carry PromQL, and every metric either names must be one that
`GET /metrics` serves. The served names come from the scrape view itself, in a process of
their own (prometheus-client's multiprocess mode fixes its directory in the environment of the
process that makes the first metric, which the servers this suite starts would inherit), after
every metric Mortar defines has been given a value: renaming or removing a metric fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
OPERATING = ROOT / "docs" / "operating"
RULES = OPERATING / "prometheus-alerts.yml"
DASHBOARD = OPERATING / "grafana-dashboard.json"

# Every metric of `telemetry.metrics.Metrics` given a value (labels filled in, whatever they
# are), then `/metrics` asked through its own view: what it prints is what a Prometheus scrapes.
SCRAPE = """
import dataclasses, django
django.setup()
from django.test import RequestFactory
from telemetry import metrics as m
from telemetry.scrape import metrics_scrape

made = m.metrics()  # first: prometheus_client picks its storage when it is first imported
from prometheus_client import Counter, Gauge, Histogram

for field in dataclasses.fields(m.Metrics):
    value = getattr(made, field.name)
    metric = value.metric if isinstance(value, m.Labelled) else value
    names = metric._labelnames
    child = metric.labels(*("x" for _ in names)) if names else metric
    if isinstance(metric, Histogram):
        child.observe(0.1)
    elif isinstance(metric, Gauge):
        child.set(1)
    else:
        assert isinstance(metric, Counter), metric
        child.inc()
response = metrics_scrape(RequestFactory().get("/metrics"))
assert response.status_code == 200, response.status_code
print(response.content.decode())
"""

PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}
RULE_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries, $__rate_interval included
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text
    )  # grouping label lists
    names = set()
    for match in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function (or an aggregation whose labels were removed above)
        if match.group().lower() in PROMQL_KEYWORDS:
            continue
        names.add(match.group())
    return names


@pytest.fixture(scope="module")
def served_metric_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The sample names `/metrics` serves once every metric Mortar defines has a value."""
    var_dir = tmp_path_factory.mktemp("var")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PROMETHEUS_MULTIPROC_DIR", "MORTAR_METRICS_TOKEN"}
    }
    env.update(DJANGO_SETTINGS_MODULE="config.settings", MORTAR_VAR_DIR=str(var_dir))
    result = subprocess.run(
        [sys.executable, "-c", SCRAPE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    from prometheus_client.parser import text_string_to_metric_families

    names = {
        sample.name
        for family in text_string_to_metric_families(result.stdout)
        for sample in family.samples
    }
    assert names, result.stdout
    return names


def rules_file() -> dict[str, Any]:
    loaded = yaml.safe_load(RULES.read_text())
    assert isinstance(loaded, dict)
    return loaded


def dashboard_panels() -> list[dict[str, Any]]:
    """Every panel of the dashboard, those inside collapsed rows too."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def rules_exprs() -> list[str]:
    return [rule["expr"] for group in rules_file()["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in dashboard_panels() for target in panel.get("targets", [])]


def test_metric_names_finds_the_metrics_of_an_expression_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, model) (rate(a_bucket{code=~"5..",x="y z"}'
        "[$__rate_interval]))) / on (model) group_left (kind) sum(b_total offset 1h) * 1e3 > bool"
        " c_rows and absent(d)"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c_rows", "d"}


def test_the_rules_file_is_prometheus_rule_groups_of_alerts() -> None:
    rules = rules_file()
    assert set(rules) == {"groups"}
    groups = rules["groups"]
    assert groups and len({group["name"] for group in groups}) == len(groups)
    alerts = []
    for group in groups:
        assert set(group) <= {"name", "interval", "limit", "rules"}, group["name"]
        assert isinstance(group["rules"], list) and group["rules"], group["name"]
        for rule in group["rules"]:
            assert set(rule) <= RULE_KEYS, rule
            assert isinstance(rule["alert"], str) and re.fullmatch(r"[A-Za-z_]\w*", rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert DURATION.match(rule["for"]), rule["alert"]
            assert all(isinstance(v, str) for v in rule["labels"].values()), rule["alert"]
            assert rule["labels"]["severity"] in {"page", "warning", "info"}, rule["alert"]
            annotations = rule["annotations"]
            assert annotations["summary"] and annotations["description"], rule["alert"]
            alerts.append(rule["alert"])
    assert len(alerts) == len(set(alerts))


def test_the_dashboard_is_grafana_json_with_promql_panels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    charts = [panel for panel in dashboard_panels() if panel["type"] != "row"]
    assert len(charts) >= 9
    for panel in charts:
        assert panel["title"] and panel["gridPos"]["w"] > 0 and panel["gridPos"]["h"] > 0
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["refId"] and metric_names(target["expr"]), panel["title"]
    ids = [panel["id"] for panel in dashboard_panels()]
    assert len(ids) == len(set(ids))


def test_every_metric_the_rules_and_dashboard_use_is_one_mortar_serves(
    served_metric_names: set[str],
) -> None:
    used = {name for expr in rules_exprs() + dashboard_exprs() for name in metric_names(expr)}
    assert used, "no metric found in the rules or the dashboard"
    assert used - served_metric_names == set()


def test_the_dashboard_charts_every_metric_mortar_serves(served_metric_names: set[str]) -> None:
    charted = {name for expr in dashboard_exprs() for name in metric_names(expr)}

    def family(name: str) -> str:
        return re.sub(r"_(bucket|sum|count)$", "", name)

    assert {family(name) for name in served_metric_names} - {family(n) for n in charted} == set()


def test_the_observing_page_links_both_files() -> None:
    page = (OPERATING / "observing.md").read_text()
    assert "(prometheus-alerts.yml)" in page
    assert "(grafana-dashboard.json)" in page
