"""The run store's engine: how runs and their chunks reach the database, and survive on the way.

The request path hands rows to the writer; everything after that is here. The store is the
bottom of the telemetry app: it imports its models and nothing else of telemetry (a contract in
pyproject.toml), and what it needs from above (the metrics) is handed down at start-up.


- ``fields``: a run's fields (``RunFields``) and images, typed, as they cross from the request
  path; ``draws``: what a run drew from its budgets.
- ``items``: the writer's rows (a run opened, a chunk sent, a run closed), and their plain form
  for the spool and the crash log.
- ``writer``: the async writer (``RunWriter``): queue, batches, backoff, spill, replay, close.
- ``running``: this process's writers, one per event loop, and their status for /readyz.
- ``gauges``: the writers' depth, reported to the metrics the app hands down at start-up.
- ``batches``: one batch in one transaction, or run by run when the database refuses it;
  ``run_locks``: the lock its replays share with the sweep of dead workers' runs.
- ``postgres``, ``sqlite``: a batch's rows in each database (COPY; the ORM).
- ``run_table``: the run table's columns as the Postgres writer sends them, values as the ORM
  would store them; ``accepted_times``: the partition of each run a batch names.
- ``images``: a new run's images, stored once per organization by content.
- ``search_text``: the text a run is found by, its prompt's and its reply's.
- ``spool``: the files that hold rows while the database is away.
- ``chunklog``: the crash log, every queued row on local disk until it is stored.
- ``partitions``: the run and chunk tables' day partitions in Postgres: created ahead, dropped
  by retention.
"""
