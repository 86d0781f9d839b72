"""Log every garbage collection of a Mortar server process: a measurement aid, not part of Mortar.

Python imports `sitecustomize` at start-up from the path, so putting this directory on
PYTHONPATH makes every uvicorn process that starts (bench/run.py passes the environment on to
the servers it starts) append one line per collection to `$GCPROBE_DIR/gc-<pid>.log`: the
time, the generation, how long it took (ms) and what it collected. `GCPROBE_OLD=N` sets the
oldest generation's threshold (Python's default is 10) before Mortar tunes the young one.

    PYTHONPATH=bench/gcprobe GCPROBE_DIR=/tmp/gc .venv/bin/python bench/run.py --quick \
        --no-litellm --no-unmetered --no-scaling --scenarios slow-1000

bench/results/gc-slow-1000.md has what it showed.
"""

import gc
import os
import sys
import time

_argv = " ".join(getattr(sys, "orig_argv", sys.argv))

if "uvicorn" in _argv and os.environ.get("GCPROBE_DIR"):
    _out = open(  # noqa: SIM115 — open for the life of the process
        os.path.join(os.environ["GCPROBE_DIR"], f"gc-{os.getpid()}.log"), "a", buffering=1 << 16
    )
    _out.write(f"# {_argv}\n")
    _started = [0.0]

    def _logged(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        took_ms = (time.perf_counter() - _started[0]) * 1000
        _out.write(f"{time.time():.3f} {info['generation']} {took_ms:.3f} {info['collected']}\n")
        if info["generation"] == 2:
            _out.flush()

    gc.callbacks.append(_logged)

    if os.environ.get("GCPROBE_OLD"):
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, int(os.environ["GCPROBE_OLD"]))
