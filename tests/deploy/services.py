"""Throwaway services on 127.0.0.1 for the deployment tests: a PostgreSQL cluster (the instance database of the
production profile and of the Celery workers) and a Redis server (the Celery broker), each in a temp dir and torn
down by its `stop`."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from causal_assets.core.llm.server import free_port


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


class Postgres:
    """A throwaway cluster: initdb into a fresh temp dir, pg_ctl start on 127.0.0.1:<free port>, stop -m immediate.
    PostgreSQL refuses to run as root, so as root the cluster belongs to `nobody` (runuser)."""

    def __init__(self):
        self.initdb, self.pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        self.dir = Path(tempfile.mkdtemp(prefix="causal_assets_pg_"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.password = "causal-assets-test"
        self.started = False

    def _run(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, start_new_session=True)
        assert done.returncode == 0, f"{cmd[0]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        return done

    def start(self) -> "Postgres":
        if os.geteuid() == 0:
            shutil.chown(self.dir, "nobody")
        pwfile = self.dir / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "nobody")
        self._run(self.initdb, "-D", str(self.data), "-U", "dagster", "--auth=scram-sha-256", f"--pwfile={pwfile}",
                  "-E", "UTF8", "--no-sync", "--no-instructions")
        self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.dir / "postgres.log"), "-w", "-t", "60",
                  "-o", f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c full_page_writes=off", "start")
        self.started = True
        return self

    def stop(self) -> None:
        try:
            if self.started:
                self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop", timeout=60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self) -> str:
        """The database as a libpq URL without the password (PGPASSWORD carries it)."""
        return f"postgresql://dagster@127.0.0.1:{self.port}/postgres"

    def env(self) -> dict[str, str]:
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USERNAME": "dagster",
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": "postgres"}


class Redis:
    """`redis-server` on 127.0.0.1:<free port> with a password, nothing persisted; `stop` kills it."""

    def __init__(self, password: str):
        self.password = password
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="causal_assets_redis_"))
        self.proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/{db}"

    def start(self, timeout_s: float = 30) -> "Redis":
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "/usr/bin/redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
             "--requirepass", self.password, "--save", "", "--appendonly", "no", "--dir", str(self.dir)],
            stdin=subprocess.DEVNULL, stdout=open(self.dir / "redis.log", "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        import socket

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.dir / "redis.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"redis-server not up within {timeout_s}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
