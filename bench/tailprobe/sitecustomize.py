"""Time a Mortar server's requests beside its run writer's batches: a measurement aid, not part
of Mortar. What it showed is in bench/results/one-conn-tail-2026-12-05.md.

Python imports `sitecustomize` at start-up from the path, so putting this directory on
PYTHONPATH makes every uvicorn process that starts (bench/run.py passes the environment on to
the servers it starts) write `$TAILPROBE_DIR/tail-<pid>.jsonl`, one line per event, all times
from `time.monotonic()`:

- `["req", start, seconds, seconds to the response's start, loop thread CPU s, runqueue wait s]`
  for every POST: the CPU and the wait for a core are the event loop thread's own, from
  `/proc/self/task/<tid>/schedstat` before and after (a request's wait for the GIL is neither);
- `["batch", start, seconds, writer thread CPU s, rows, Postgres CPU s, Postgres runqueue wait s,
  the core Postgres last ran on]` for every batch the run writer writes (Postgres's backend read
  from `/proc`: Postgres must run on this machine);
- `["lag", start, seconds late, loop thread CPU s, runqueue wait s]` whenever a 5 ms sleep of
  the event loop wakes more than 1.5 ms late.

Two knobs add work to each batch, to see what the requests are sensitive to:
`TAILPROBE_WRITER_BURN_MS` (Python on the writer's thread, holding the GIL) and
`TAILPROBE_PG_BURN_ROWS` (a `generate_series` count in Postgres, on the writer's connection).

    PYTHONPATH=bench/tailprobe TAILPROBE_DIR=/tmp/tail .venv/bin/python bench/run.py \
        --scenarios json-1 --rounds 1 --no-litellm --no-scaling --no-unmetered
    .venv/bin/python bench/tailprobe/analyze.py /tmp/tail
"""

import os
import sys

_argv = " ".join(getattr(sys, "orig_argv", sys.argv))

if "uvicorn" in _argv and os.environ.get("TAILPROBE_DIR"):
    import asyncio
    import atexit
    import importlib.abc
    import json
    import threading
    import time

    _now = time.monotonic
    _events: list[list[float]] = []
    _path = os.path.join(os.environ["TAILPROBE_DIR"], f"tail-{os.getpid()}.jsonl")

    def _flush() -> None:
        if not _events:
            return
        taken = _events[:]
        del _events[: len(taken)]
        with open(_path, "a") as out:
            out.writelines(json.dumps(event) + "\n" for event in taken)

    atexit.register(_flush)

    def _schedstat(path: str) -> tuple[float, float]:
        """Seconds on a CPU and seconds runnable but waiting for one, of a thread or process."""
        with open(path) as f:
            on_cpu, waiting, _ = f.read().split()
        return int(on_cpu) / 1e9, int(waiting) / 1e9

    def _loop_stat_path() -> str:
        return f"/proc/self/task/{threading.get_native_id()}/schedstat"

    async def _watch_the_loop() -> None:
        path = _loop_stat_path()
        flushed = _now()
        while True:
            started, cpu = _now(), time.thread_time()
            _, waited = _schedstat(path)
            await asyncio.sleep(0.005)
            late = _now() - started - 0.005
            if late > 0.0015:
                _, waited_after = _schedstat(path)
                _events.append(
                    ["lag", started, late, time.thread_time() - cpu, waited_after - waited]
                )
            if _now() - flushed > 2:
                flushed = _now()
                _flush()

    _watching: list[asyncio.Task[None]] = []

    def _probed(app):  # type: ignore[no-untyped-def]
        async def probed(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] != "http" or scope["method"] != "POST":
                return await app(scope, receive, send)
            if not _watching:
                _watching.append(asyncio.get_running_loop().create_task(_watch_the_loop()))
            path = _loop_stat_path()
            on_cpu, waited = _schedstat(path)
            started = _now()
            response_started = [0.0]

            async def timed_send(message):  # type: ignore[no-untyped-def]
                if message["type"] == "http.response.start":
                    response_started[0] = _now() - started
                await send(message)

            await app(scope, receive, timed_send)
            seconds = _now() - started
            on_cpu_after, waited_after = _schedstat(path)
            _events.append(
                [
                    "req",
                    started,
                    seconds,
                    response_started[0],
                    on_cpu_after - on_cpu,
                    waited_after - waited,
                ]
            )

        return probed

    def _postgres_stat(connection) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
        try:
            pid = connection.connection.info.backend_pid
            on_cpu, waited = _schedstat(f"/proc/{pid}/schedstat")
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            core = int(stat[stat.rindex(")") + 2 :].split()[36])
        except Exception:  # no connection yet, or Postgres is not on this machine
            return 0.0, 0.0, -1
        return on_cpu, waited, core

    def _probe_writer(module) -> None:  # type: ignore[no-untyped-def]
        from django.db import connection

        write = module.RunWriter._write
        writer_burn = float(os.environ.get("TAILPROBE_WRITER_BURN_MS", "0")) / 1000
        postgres_burn = int(os.environ.get("TAILPROBE_PG_BURN_ROWS", "0"))

        def probed_write(self, items, replay):  # type: ignore[no-untyped-def]
            started, cpu = _now(), time.thread_time()
            postgres = _postgres_stat(connection)
            try:
                write(self, items, replay)
                if writer_burn:
                    until, spins = time.thread_time() + writer_burn, 0
                    while time.thread_time() < until:
                        spins += 1
                if postgres_burn:
                    with connection.cursor() as cursor:
                        cursor.execute(
                            "SELECT count(*) FROM generate_series(1, %s)", [postgres_burn]
                        )
            finally:
                after = _postgres_stat(connection)
                _events.append(
                    [
                        "batch",
                        started,
                        _now() - started,
                        time.thread_time() - cpu,
                        len(items),
                        after[0] - postgres[0],
                        after[1] - postgres[1],
                        after[2],
                    ]
                )

        module.RunWriter._write = probed_write

    def _probe_app(module) -> None:  # type: ignore[no-untyped-def]
        module.application = _probed(module.application)

    class _AfterImport(importlib.abc.MetaPathFinder):
        """Runs a hook on a module right after it is executed (before anyone reads it)."""

        hooks = {"config.asgi": _probe_app, "telemetry.store.writer": _probe_writer}

        def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
            hook = self.hooks.get(name)
            if hook is None:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            execute = loader.exec_module

            def exec_module(module):  # type: ignore[no-untyped-def]
                execute(module)
                hook(module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _AfterImport())
