"""A throwaway Postgres server for tests: Debian's `postgresql` binaries, initdb into a
temporary folder, listening on a free loopback port and a Unix socket in that folder,
stopped (and its folder removed) afterwards.

Postgres refuses to run as root, so under root the server runs as the unprivileged user
`nobody`, owning only its temporary folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.optional import missing

# CI sets GRADETRAIL_REQUIRE_POSTGRES=1: there a missing server fails the tests instead of
# skipping them.
REQUIRED = os.environ.get("GRADETRAIL_REQUIRE_POSTGRES") == "1"

_NOBODY = 65534


def _bin_dir() -> Path | None:
    """The folder with initdb and pg_ctl: on PATH, else the newest Debian version."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


def postgres_problem() -> str | None:
    """Why a throwaway server cannot start here, or None."""
    if _bin_dir() is None:
        return "Postgres not installed (no initdb): apt-get install postgresql"
    return missing("psycopg")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class PostgresServer:
    port: int
    socket_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    bin_dir = _bin_dir()
    assert bin_dir is not None, postgres_problem()
    root = Path(tempfile.mkdtemp(prefix="gradetrail-pg-"))
    as_root = os.geteuid() == 0
    # mkdtemp makes the folder 0700; the server's user must be able to reach it.
    root.chmod(0o755)
    data, sock = root / "data", root / "sock"
    data.mkdir()
    sock.mkdir()
    if as_root:
        for path in (data, sock):
            os.chown(path, _NOBODY, _NOBODY)

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        prefix = (
            ["setpriv", f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups"]
            if as_root
            else []
        )
        return subprocess.run(
            prefix + args,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
            env={**os.environ, "LC_ALL": "C"},
        )

    port = _free_port()
    done = run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]
    )
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sock} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
    )
    started = run(
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(sock / "log"),
            "-w",
            "start",
        ]
    )
    if started.returncode != 0:
        log = (sock / "log").read_text() if (sock / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {started.stderr[-1000:]} {log[-2000:]}")
    try:
        yield PostgresServer(port=port, socket_dir=sock)
    finally:
        run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        remove_in_background(root)


def remove_in_background(root: Path) -> None:
    """Deletes `root` from a process that outlives this one: the session's databases are
    tens of thousands of files, whose deletion held the session's end for 1.3-20 s (a
    shell that backgrounds `rm` and exits at once, so nothing is left to wait for)."""
    if shutil.which("rm") is None:
        shutil.rmtree(root, ignore_errors=True)
        return
    subprocess.run(
        ["sh", "-c", 'rm -rf -- "$0" >/dev/null 2>&1 &', str(root)],
        check=True,
        start_new_session=True,
    )
