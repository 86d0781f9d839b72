"""The load comparison behind `make bench` (`python -m bench load`): Mortar side by side with the
LiteLLM proxy and the mock model server itself, on one machine. It:

- creates its own Postgres database (`mortar_bench_gateway`, dropped and re-created; the
  writer benchmark owns `mortar_bench`) and migrates it,
  uses Redis under its own key prefix, and applies a config with one deployment on the mock,
  one organization and one key;
- starts the mock model server (`python -m mockmodel`) on core 1; Mortar (uvicorn, one
  worker, as `make serve` runs it, with Postgres run recording and Redis telemetry on) and the
  LiteLLM proxy (its own virtual environment under bench/.litellm-venv, one worker, a master
  key, no database) on core 0; and `mortar@2-workers`, the same Mortar served by two uvicorn
  workers on both cores — shared with the mock and the load generators, which stay on core 1
  (its own database and Redis prefix; measured on json-32 and stream-32 only);
- waits (bounded by --wait-quiet) until nothing else burns CPU on the machine, and records
  what it cannot explain per measurement;
- loads them from separate processes on core 1 (wrk for throughput, `python -m bench loadgen`
  for gaps between chunks and one-connection latency), targets interleaved over the rounds. The
  1,000 slow streams are one long stream per connection (a token every 50 ms for the ramp plus
  one measurement), so all of them overlap for a whole measurement. Every Mortar but the
  two-worker one is also measured on Anthropic's Messages route (`POST /v1/messages`, which
  neither the mock nor LiteLLM serves): messages-json-32 and messages-stream-32, the same
  request as json-32 and stream-32 in Anthropic's shape, each measured right after its chat
  completions twin;
- prints a table of medians with ratios to `direct` and to `litellm`; each Mortar's Messages
  throughput beside its chat completions' (the goal: within 10%); and "Beyond one core":
  what one core of Mortar's CPU serves, and its two workers' throughput over its one worker's
  in the same run (each worker's share of the load, and the cores the rest of the machine
  used beside them); writes it to bench/results/latest.md, and keeps every raw number in
  bench/results/latest.json.

Every process it starts is stopped on the way out, whatever happens; every wait is bounded.

    .venv/bin/python -m bench load [--quick] [--rounds N] [--duration S] [--profile]
    .venv/bin/python -m bench load --scenarios json-32,messages-json-32 --no-litellm
    .venv/bin/python -m bench load --render bench/results/run-<stamp>.json   # table only
    .venv/bin/python -m bench load --baseline 2c7f566 [--no-litellm]          # before/after

`--baseline REF` also measures Mortar at git revision REF, side by side with the working tree
in the same interleaved rounds: REF is checked out into a temporary `git worktree` (removed
afterwards) and served from the same venv (the run stops first if REF's declared dependencies
are not satisfied there), started exactly as the working tree's Mortar — same uvicorn command,
core, settings and environment — with its own database (`mortar_bench_gateway_at_<commit>`) and
Redis prefix. It is the target `mortar@<commit>`, measured on the Messages scenarios too if it
has the route; the report adds its column, an "after vs before" column (the working tree
against REF) and a verdict per throughput and latency measure (within 5% of before, or better).
`--no-litellm` leaves LiteLLM out, for a shorter before/after run.

`--no-scaling` leaves `mortar@2-workers` out (it adds about a minute and a half to a default
run: six measurements, a warm-up and a database to migrate).

`--profile` also records py-spy profiles of Mortar under each scenario's load (needs
`.venv/bin/pip install py-spy`) and sums them up in bench/results/profile-summary.md.

Its modules, some of which the other benchmarks in bench/ share:

- constants: paths, cores, model and request shape — the fixed rules of every run;
- processes: starting, waiting for and stopping child processes;
- stores: the bench databases and Redis (create, counters, clean-up);
- baseline: Mortar at another git revision in a temporary worktree;
- mortar, litellm, targets: the servers under test, and starting all of them;
- scenarios: what is measured and the requests it sends, on chat completions and Messages;
- checks: one request of each kind to each target, checked, before anything is measured;
- load, loadgen/, post.lua: the load generators (wrk and the asyncio client) and how they run;
- cpu, measurement: CPU accounting and one measurement;
- stats: the one percentile every benchmark in bench/ reports;
- metrics, verdicts, scaling: medians, the verdicts, one worker against two;
- markdown, report, sections: the markdown report;
- profiling, profile_summary: py-spy profiles of Mortar and where their time goes;
- results: the result file of a benchmark that prints its results;
- cli: the command line and the interleaved rounds.
"""
