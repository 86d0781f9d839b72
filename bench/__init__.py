"""Mortar's benchmarks, one tool: `python -m bench COMMAND` (`python -m bench --help` lists every
command with the question it answers; bench/commands.py is that list). Not part of Mortar: bench
may import any of Mortar's packages, and none of them imports bench.

- harness/: the load comparison (`load`, which `make bench` runs) and what the other benchmarks
  share with it: paths, processes, databases, result files, the one percentile (stats.py's,
  the nearest rank, everywhere in bench/);
- micro/: one part of Mortar each, in one process; pages/: the dashboard's pages at a million
  runs; scale/: the run store at 10,000,000 runs (`make bench-scale`) and what a stored request
  costs Postgres; soak.py and instructions.py: a served Mortar for ten minutes, and under
  callgrind;
- results/: the latest run of each (earlier runs stay in git).

A command that needs processes of its own starts them through the same entry point, with the
commands `--help` lists as started by the others: `load` its load generators (`python -m bench
loadgen …`), `scale` its run writer (`python -m bench scale-writer …`), and `micro
upstream-client` each candidate (`python -m bench micro upstream-client --worker …`). Only
`micro chunk-bytes --baseline DIR` loads its measuring function by its file's path (`python -c`)
in the other checkout, whose own bench/ may predate it.
"""
