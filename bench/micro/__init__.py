"""Benchmarks of one part of Mortar each, in one process, against the real Postgres and Redis
where the part uses them: seconds to minutes each, so one change can be measured at a time.
Run each from the repository's root as `.venv/bin/python -m bench micro <name>`; each writes its
latest run to bench/results/<name>.md. `python -m bench micro --help` lists them with the
question each answers."""
