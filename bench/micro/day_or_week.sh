#!/usr/bin/env bash
# Day or week partitions: what planning and running the run store's usual queries costs over 63
# day partitions against 9 week partitions of the same 1,000,000 rows (a run table reduced to
# the columns the queries read), on a new connection (cold) and on one that has planned before
# (warm). Usage: bench/micro/day_or_week.sh [DATABASE_URL]; the tables are dropped at the end.
# Results: bench/results/day-or-week.md.
set -euo pipefail
URL=${1:-postgres://postgres@127.0.0.1:5432/postgres}
psql "$URL" -q <<'SQL'
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
SQL
for t in dw_day dw_week; do
  echo "== $t: planning / execution, ms: first query of a connection, then the 2nd to 4th"
  for q in "SELECT id FROM $t WHERE org = 7 ORDER BY accepted_at DESC LIMIT 50" \
           "SELECT id FROM $t WHERE org = 7 AND accepted_at >= '2026-11-20' AND accepted_at < '2026-11-27' ORDER BY accepted_at DESC LIMIT 50" \
           "SELECT id FROM $t WHERE id = 'chatcmpl-77'" \
           "SELECT count(*) FROM $t WHERE org = 7 AND accepted_at >= '2026-11-01' AND accepted_at < '2026-12-01'"; do
    echo "$q"
    (for _ in 1 2 3 4; do echo "EXPLAIN (ANALYZE, SUMMARY) $q;"; done) | psql "$URL" -At \
      | grep -E "Planning Time|Execution Time" | sed 's/.*: //; s/ ms//' | paste -d/ - - | tr '\n' ' '
    echo
  done
done
psql "$URL" -q -c "DROP TABLE dw_day, dw_week"
