"""`python -m bench COMMAND …`: the one way in to Mortar's benchmarks (bench/commands.py)."""

import sys

from bench.commands import run

run(sys.argv[1:])
