"""`python -m bench.harness`: the same as bench/run.py."""

from .cli import main

main()
