"""Day or week partitions: what planning and running the run store's usual queries costs over 63
day partitions against 9 week partitions of the same 1,000,000 rows (a run table reduced to the
columns the queries read), on a new connection (cold) and on one that has planned before (warm).

    .venv/bin/python -m bench micro day-or-week [DATABASE_URL]

Its tables (dw_day, dw_week) go in DATABASE_URL's database (default the local Postgres's
`postgres`) and are dropped at the end. Prints planning/execution in ms per query: the first of a
new connection, then three more on it; bench/results/day-or-week.md is a run of it, written up.
"""

from __future__ import annotations

import argparse
import subprocess

from bench.commands import program

TABLES = ("dw_day", "dw_week")
SETUP = """\
DROP TABLE IF EXISTS dw_day, dw_week;
CREATE TABLE dw_day (id text, org int, accepted_at timestamptz NOT NULL, status text)
    PARTITION BY RANGE (accepted_at);
CREATE TABLE dw_week (id text, org int, accepted_at timestamptz NOT NULL, status text)
    PARTITION BY RANGE (accepted_at);
DO $$ DECLARE d date := date '2026-10-05'; BEGIN
  FOR i IN 0..62 LOOP
    EXECUTE format('CREATE TABLE dw_day_%s PARTITION OF dw_day FOR VALUES FROM (%L) TO (%L)',
                   i, (d + i)::timestamptz, (d + i + 1)::timestamptz);
  END LOOP;
  FOR i IN 0..8 LOOP
    EXECUTE format('CREATE TABLE dw_week_%s PARTITION OF dw_week FOR VALUES FROM (%L) TO (%L)',
                   i, (d + 7 * i)::timestamptz, (d + 7 * i + 7)::timestamptz);
  END LOOP;
END $$;
CREATE TABLE dw_day_default PARTITION OF dw_day DEFAULT;
CREATE TABLE dw_week_default PARTITION OF dw_week DEFAULT;
INSERT INTO dw_day SELECT 'chatcmpl-' || g, g % 50,
    timestamptz '2026-10-05' + (g * interval '1 second') * 5, 'completed'
FROM generate_series(1, 1000000) g;
INSERT INTO dw_week SELECT * FROM dw_day;
CREATE INDEX ON dw_day (org, accepted_at DESC);
CREATE INDEX ON dw_week (org, accepted_at DESC);
CREATE INDEX ON dw_day (id, accepted_at);
CREATE INDEX ON dw_week (id, accepted_at);
ANALYZE dw_day;
ANALYZE dw_week;
"""
QUERIES = (
    "SELECT id FROM {t} WHERE org = 7 ORDER BY accepted_at DESC LIMIT 50",
    "SELECT id FROM {t} WHERE org = 7 AND accepted_at >= '2026-11-20' AND accepted_at < "
    "'2026-11-27' ORDER BY accepted_at DESC LIMIT 50",
    "SELECT id FROM {t} WHERE id = 'chatcmpl-77'",
    "SELECT count(*) FROM {t} WHERE org = 7 AND accepted_at >= '2026-11-01' AND accepted_at < "
    "'2026-12-01'",
)


def psql(url: str, *flags: str, script: str) -> str:
    """What psql printed running `script`; its errors go to stderr, and do not stop it."""
    return subprocess.run(
        ["psql", url, *flags], input=script, text=True, stdout=subprocess.PIPE, check=True
    ).stdout


def timings(url: str, query: str) -> str:
    """Planning/execution ms of four runs of `query` on one new connection."""
    output = psql(url, "-At", script=f"EXPLAIN (ANALYZE, SUMMARY) {query};\n" * 4)
    times = [
        line.rsplit(": ", 1)[1].removesuffix(" ms")
        for line in output.splitlines()
        if line.startswith(("Planning Time", "Execution Time"))
    ]
    return "".join(f"{plan}/{run} " for plan, run in zip(times[::2], times[1::2], strict=True))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument(
        "database_url", nargs="?", default="postgres://postgres@127.0.0.1:5432/postgres"
    )
    url: str = parser.parse_args(argv).database_url
    print(psql(url, "-q", script=SETUP), end="")
    for table in TABLES:
        print(
            f"== {table}: planning / execution, ms: first query of a connection, "
            "then the 2nd to 4th"
        )
        for query in QUERIES:
            print(query.format(t=table))
            print(timings(url, query.format(t=table)), flush=True)
    psql(url, "-q", "-c", "DROP TABLE dw_day, dw_week", script="")
