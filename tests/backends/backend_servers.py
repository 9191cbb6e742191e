"""Real servers the backend tests start on loopback and stop by PID.

moto's S3 server lives in :mod:`lifeboatcache.loopback` (the benchmarks start it too); the
PostgreSQL cluster is the tests' own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from lifeboatcache.loopback import MotoServer, free_port, wait_for_port

__all__ = ["MotoServer", "PostgresServer", "free_port", "wait_for_port"]

POSTGRES_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))


class PostgresServer:
    """A throw-away PostgreSQL cluster on loopback (Debian's ``postgresql``), run as ``postgres``.

    initdb refuses to run as root, so the cluster belongs to the ``postgres`` user the Debian
    package creates; its directory is a fresh temp dir that user owns.
    """

    def __init__(self) -> None:
        import pwd
        import shutil
        import tempfile

        if not POSTGRES_BIN:
            raise RuntimeError("PostgreSQL is not installed: run `make setup` (.ci/setup.d/30-postgresql.sh)")
        bin_dir = POSTGRES_BIN[-1]
        user = pwd.getpwnam("postgres")
        self.dir = Path(tempfile.mkdtemp(prefix="lifeboat-pg-"))
        shutil.chown(self.dir, user.pw_uid, user.pw_gid)
        self._rmtree = shutil.rmtree
        self.port = free_port()
        as_postgres: dict[str, object] = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        subprocess.run([str(bin_dir / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, cwd=self.dir,
                       **as_postgres)  # type: ignore[call-overload]
        self._bin, self._as_postgres = bin_dir, as_postgres
        self.log = open(self.dir / "server.log", "wb")  # closed in stop()
        self.start()

    def start(self) -> None:
        """Start (or restart, on the same port and data) the server and wait until it answers."""
        self.proc = subprocess.Popen(
            [str(self._bin / "postgres"), "-D", str(self.dir / "data"), "-h", "127.0.0.1", "-p", str(self.port),
             "-k", str(self.dir), "-c", "fsync=off", "-c", "max_connections=200"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir, **self._as_postgres,  # type: ignore[call-overload]
        )
        wait_for_port(self.port, self.proc)
        self._wait_ready()

    def halt(self) -> None:
        """Stop the server, keeping its data (a database outage)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import sqlalchemy

        engine = sqlalchemy.create_engine(self.url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    with engine.connect() as conn:
                        conn.execute(sqlalchemy.text("SELECT 1"))
                    return
                except sqlalchemy.exc.OperationalError:  # still starting up
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        finally:
            engine.dispose()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        self.halt()
        self.log.close()
        self._rmtree(self.dir, ignore_errors=True)
