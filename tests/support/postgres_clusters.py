"""Throwaway Postgres clusters for tests: a primary of the test's own, a streaming replica of it,
and PgBouncer in front of a database — each a real server process on a free loopback port,
under a temporary directory, stopped and removed by the test that made it.

Postgres refuses to run as root: when the tests run as root, its programs run as the
`postgres` OS user (`runuser`), which then owns the temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.support.servers import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _as_postgres(command: Sequence[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return list(command)


def run_as_postgres(command: Sequence[str], *, cwd: Path, timeout: float = 120) -> str:
    result = subprocess.run(
        _as_postgres(command), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def scratch_directory(prefix: str) -> Path:
    """A temporary directory the server processes' user may write in."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


def remove_scratch(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Cluster:
    """One Postgres cluster: its data directory and the port it listens on."""

    data_dir: Path
    port: int

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.data_dir.parent}"
            # Throwaway data: nothing to keep across a crash, so no waiting for the disk.
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c shared_buffers=32MB -c max_connections=60"
        )
        run_as_postgres(
            [
                str(PG_BIN / "pg_ctl"),
                *("-D", str(self.data_dir), "-l", str(self.log_path), "-o", options),
                *("-w", "-t", "60", "start"),
            ],
            cwd=self.data_dir.parent,
        )

    def stop(self) -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        run_as_postgres(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
            cwd=self.data_dir.parent,
        )

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=5)

    def query(self, sql: str, params: Sequence[Any] = (), *, dbname: str = "postgres") -> Any:
        """The first column of the first row `sql` returns (None without one)."""
        with self.connect(dbname) as conn:
            cursor = conn.execute(sql, params)  # type: ignore[arg-type]
            row = cursor.fetchone() if cursor.description else None
        return row[0] if row else None


def primary_cluster(base: Path) -> Cluster:
    """A new cluster under `base`, started: trusting loopback connections, replication too."""
    cluster = Cluster(data_dir=base / "primary", port=free_port())
    run_as_postgres(
        [
            str(PG_BIN / "initdb"),
            *("-D", str(cluster.data_dir), "-U", "postgres", "--auth=trust"),
            *("-E", "UTF8", "--locale=C.UTF-8", "--no-sync"),
        ],
        cwd=base,
    )
    cluster.start()
    return cluster


def replica_cluster(primary: Cluster, base: Path) -> Cluster:
    """A streaming replica of `primary` (`pg_basebackup -R`), started on a port of its own."""
    cluster = Cluster(data_dir=base / "replica", port=free_port())
    run_as_postgres(
        [
            str(PG_BIN / "pg_basebackup"),
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
            *("-D", str(cluster.data_dir), "-R", "-X", "stream", "--no-sync"),
            "--checkpoint=fast",  # a spread checkpoint would take minutes
        ],
        cwd=base,
    )
    cluster.start()
    return cluster


def copy_database(*, source_url: str, target: Cluster, dbname: str, cwd: Path) -> None:
    """Copy a database (schema and rows) into a new database of `target`."""
    target.query(f'CREATE DATABASE "{dbname}"')
    dump = subprocess.run(
        [str(PG_BIN / "pg_dump"), "--no-owner", "--no-privileges", source_url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    subprocess.run(
        [str(PG_BIN / "psql"), "-q", "-v", "ON_ERROR_STOP=1", target.url(dbname)],
        input=dump.stdout,
        capture_output=True,
        timeout=120,
        check=True,
        cwd=cwd,
    )


@dataclass
class Pooler:
    """PgBouncer on a port of its own, its process started by the test."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_pgbouncer(
    *, base: Path, host: str, port: int, dbname: str, pool_size: int = 10, timeout: float = 15
) -> Pooler:
    """PgBouncer in transaction pooling in front of `dbname` on host:port, trusting loopback."""
    listen = free_port()
    log_path = base / "pgbouncer.log"
    ini = base / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"{dbname} = host={host} port={port} dbname={dbname}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\n"
        f"unix_socket_dir = {base}\n"
        "auth_type = trust\n"
        f"auth_file = {base / 'userlist.txt'}\n"
        "pool_mode = transaction\n"
        # Every transaction ends with its server connection wiped: what a client left there
        # (a prepared statement, a temporary table, a session setting) is gone at once, as
        # it would be whenever the next transaction lands on another connection.
        "server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 200\n"
        f"logfile = {log_path}\n"
        f"pidfile = {base / 'pgbouncer.pid'}\n"
    )
    (base / "userlist.txt").write_text('"postgres" ""\n')
    if os.geteuid() == 0:
        for path in (ini, base / "userlist.txt"):
            shutil.chown(path, "postgres", "postgres")
    process = subprocess.Popen(
        _as_postgres([PGBOUNCER, str(ini)]),
        cwd=base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    pooler = Pooler(process=process, port=listen, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {process.returncode}:\n{_read(log_path)}")
        try:
            with psycopg.connect(pooler.url(dbname), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return pooler
        except psycopg.OperationalError:
            time.sleep(0.1)
    pooler.stop()
    raise RuntimeError(f"pgbouncer did not answer within {timeout}s:\n{_read(log_path)}")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
