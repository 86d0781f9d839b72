"""CPU accounting from /proc: per process tree, per core, and the machine's other load."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from pathlib import Path


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def system_calls(pids: list[int]) -> dict[str, int]:
    """Read and write system calls so far of these processes (all their threads), and the
    context switches of their main threads (a server's event loop): how often it left its
    core to wait (`voluntary`) or was put off it (`nonvoluntary`)."""
    total = {"reads": 0, "writes": 0, "voluntary": 0, "nonvoluntary": 0}
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                name, value = line.split(":")
                if name in ("syscr", "syscw"):
                    total["reads" if name == "syscr" else "writes"] += int(value)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    name, value = line.split(":")
                    total[name.split("_")[0]] += int(value)
    return total


def process_cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU time of each of these processes (all its threads)."""
    return {pid: cpu_seconds([pid]) for pid in pids}


def core_busy_seconds() -> dict[str, float]:
    """Busy (non-idle) seconds of each CPU since boot, from /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            numbers = [int(v) for v in values]
            busy[name] = (sum(numbers[:8]) - numbers[3] - numbers[4]) / tick  # minus idle, iowait
    return busy


def pids_named(*names: str) -> list[int]:
    """The processes whose command name is one of `names`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() in names:
                    found.append(int(entry.name))
    return found


def database_backends(databases: list[str]) -> list[int]:
    """Postgres backends connected to one of these databases (their title names it)."""
    found = []
    for pid in pids_named("postgres"):
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if any(f" {database} " in title for database in databases):
                found.append(pid)
    return found


def children_cpu() -> float:
    """CPU time of this process's finished children (the load generators)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def background_cpu(seconds: float = 2.0) -> float:
    """How many cores' worth of CPU the machine burns right now (before we start anything)."""
    before = core_busy_seconds()
    time.sleep(seconds)
    after = core_busy_seconds()
    return round(sum(after[k] - before[k] for k in after) / seconds, 2)


def wait_for_quiet_machine(limit_s: float) -> list[float]:
    """Wait (at most `limit_s`) until other processes use less than a fifth of a core: two
    cores leave no room for anyone else's load during a benchmark. Return the samples."""
    samples = []
    deadline = time.monotonic() + limit_s
    for _ in range(1000):
        samples.append(background_cpu())
        if samples[-1] < 0.2 or time.monotonic() >= deadline:
            break
        print(
            f"  the machine is busy ({samples[-1]:.2f} cores used by others); waiting …", flush=True
        )
        time.sleep(8)
    return samples
