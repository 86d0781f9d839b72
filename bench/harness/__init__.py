"""The benchmark harness behind `make bench` (bench/run.py is its entry point; see its docstring).

- constants: paths, cores, model and request shape — the fixed rules of every run;
- processes: starting, waiting for and stopping child processes;
- stores: the bench databases and Redis (create, counters, clean-up);
- baseline: Mortar at another git revision in a temporary worktree;
- mortar, litellm, targets: the servers under test, and starting all of them;
- scenarios, load: what is sent, and the load generators that send it;
- cpu, measure: CPU accounting and one measurement;
- metrics, report: medians, verdicts and the markdown report;
- profiling: py-spy profiles of Mortar;
- cli: the command line and the interleaved rounds.
"""
