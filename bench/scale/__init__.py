"""The run store at scale: 10,000,000 runs and 100,000,000 chunks over 60 days, then the
dashboard, replay, retention and the writer measured on it while the writer keeps storing.

    make bench-scale                                   # the whole thing (~1 h on 2 cores)
    .venv/bin/python -m bench scale --runs 100000      # a quick one (about a minute)
    .venv/bin/python -m bench scale --keep             # measure again, without refilling

Its own database, `mortar_bench_scale` on DATABASE_URL's server, dropped and made again
(`--keep` measures the one filled before; `--drop` drops it at the end). In order:

- fill (bench/scale/fill.py): the day partitions made first (`ensure_partitions`), then each
  day's runs and chunks by one `INSERT … SELECT generate_series` (its docstring says what they
  look like), `--jobs` days at once, progress and ETA printed; the indexes built after the
  rows are in (`--indexes on` keeps them on); beat's rollups of the last 31 days. It stops if
  the disk has less than `--min-free-gb` free;
- the run writer's rows/s on the empty store (before the fill) and on the full one, each
  the median of three bursts of `--burst` streams in a process of its own
  (bench/scale/writer_load.py); target: the full store's within 10% of the empty one's;
- then, with the writer storing `--rate` rows/s (20,000) in its own process, and the
  server's autovacuum on (`--no-autovacuum` leaves the setting alone; it is restored after):
  the runs list (first and deep pages, free-text searches, each filter; p95 ≤ 200 ms), a run's
  page (≤ 100 ms), Spend over 30 days (≤ 1 s), each through Django's test client as a staff
  user, `--samples` tries each with another value (bench/scale/page_timings.py); replay's time to
  first byte through a served Mortar over HTTP (≤ 50 ms, bench/scale/replay_ttfb.py); dropping
  the oldest day (`drop_partitions_before`, ≤ 1 s); autovacuum's backlog (tables whose dead
  rows are past its threshold; none);
- the bytes of a run and a chunk (heap and indexes, over the rows).

Writes bench/results/scale.md.
"""
