"""The load generator process `python -m bench load` starts (`python -m bench loadgen slow|latency
…`): its flags, the run, one JSON object on stdout; the package's docstring says more."""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys

from bench.commands import program

from . import __doc__ as package_doc
from .connection import build_endpoint
from .latency import one_connection
from .slow import slow_streams


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=program(__name__), description=(package_doc or "").splitlines()[0]
    )
    parser.add_argument("mode", choices=("slow", "latency"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument(
        "--header", action="append", default=[], help='a request header, "Name: value"'
    )
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds to open all streams")
    parser.add_argument("--tokens", type=int, default=260, help="tokens per slow stream")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    parser.add_argument("--drain-timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(args.body_file, "rb") as file:
        endpoint = build_endpoint(args.url, file.read(), args.header)
    run = slow_streams if args.mode == "slow" else one_connection
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(run(args, endpoint))
    else:
        result = uvloop.run(run(args, endpoint))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
