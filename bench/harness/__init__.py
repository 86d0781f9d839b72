"""The benchmark harness behind `make bench` (bench/run.py is its entry point; see its docstring),
and what the other benchmarks in bench/ share with it.

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
- index: every other benchmark in bench/, the question it answers and how to run it;
- cli: the command line and the interleaved rounds.
"""
