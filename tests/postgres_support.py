"""A real PostgreSQL server for the tests: Debian's `postgresql` package, started by the tests.

`PostgresServer` runs `initdb` in a temporary directory and starts `postgres` on 127.0.0.1 (a
free port; its unix socket inside the directory too), as an unprivileged user: PostgreSQL
refuses to run as root, and the tests run as root in CI, so the server runs as `tpucared-pg`
(made with `useradd` if missing) through `runuser`. As another user, it runs as that user.

Authentication: `postgres` (the superuser) is trusted on 127.0.0.1 and the socket, so the
tests' URLs need no password; `PASSWORD_USER` needs its password (scram-sha-256), for the
tests of passwords from the environment and from a `.pgpass` file.

Made for speed, not durability (`fsync=off`): the data directory is thrown away at the end.
The binaries come from `pg_config --bindir`'s directory or /usr/lib/postgresql/*/bin. Anything
that goes wrong raises `PostgresError` with the server's log: the fixtures fail with it, never
skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy.engine import URL

from bench.common import free_port

USER = "tpucared-pg"  # the unprivileged system user that runs the server when we are root
SUPERUSER = "postgres"
PASSWORD_USER = "tpucared_pw"
PASSWORD = "s3cret-pw"  # a test server's, on loopback only
START_TIMEOUT_S = 60


class PostgresError(RuntimeError):
    """PostgreSQL could not be set up or started."""


def bindir() -> Path:
    """The directory with initdb, pg_ctl, postgres and psql."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    raise PostgresError(
        "PostgreSQL's server binaries are missing (no /usr/lib/postgresql/*/bin/initdb): "
        "install Debian's `postgresql` package (`.ci/run` does)"
    )


def _version(path: str) -> int:
    name = Path(path).parent.name
    return int(name) if name.isdigit() else 0


class PostgresServer:
    """`start()` a server, `create_database()` per test, `stop()` at the end."""

    def __init__(self) -> None:
        self.bin = bindir()
        self.root = Path(tempfile.mkdtemp(prefix="tpucared-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.user = USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._count = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.sockets.mkdir()
        if os.geteuid() == 0:
            self._ensure_user()
            owner = pwd.getpwnam(self.user)
            for path in (self.root, self.sockets):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self.root.chmod(0o700)
        self._as_server(
            argv=[
                "initdb",
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )
        (self.data / "pg_hba.conf").write_text(
            "# tests: the superuser is trusted locally, everyone else gives a password\n"
            f"local all {SUPERUSER} trust\n"
            f"host all {SUPERUSER} 127.0.0.1/32 trust\n"
            "local all all scram-sha-256\n"
            "host all all 127.0.0.1/32 scram-sha-256\n",
            encoding="utf-8",
        )
        self.resume()
        self.psql(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'")

    def halt(self) -> None:
        """Stop the server as a crash or an operator's `pg_ctl stop -m immediate` would: every
        connection drops at once. `resume()` starts it again on the same data."""
        self._as_server(argv=["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def resume(self) -> None:
        """Start the server (again) on its data directory, port and settings."""
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.sockets}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
                "-c shared_buffers=32MB",
            ]
        )
        self._as_server(
            argv=[
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "start",
            ]
        )

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._as_server(argv=["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ------------------------------------------------------------------------------

    def url(self, database: str, *, user: str = SUPERUSER, password: str | None = None) -> URL:
        return URL.create(
            "postgresql+asyncpg",
            username=user,
            password=password,
            host="127.0.0.1",
            port=self.port,
            database=database,
        )

    def create_database(self, owner: str = SUPERUSER) -> str:
        """A new empty database (its name), owned by `owner`."""
        self._count += 1
        name = f"t{os.getpid()}_{self._count}"
        self.psql(f'CREATE DATABASE "{name}" OWNER {owner}')
        return name

    def drop_database(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL as the superuser with `psql`; its unaligned, tuples-only output."""
        command = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        argv = [*command, "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER]
        result = self._run([*argv, "-d", database, "-c", sql], server=False)
        return result.stdout

    # -- processes ------------------------------------------------------------------------------

    def _ensure_user(self) -> None:
        try:
            pwd.getpwnam(self.user)
        except KeyError:
            self._run(
                argv=["useradd", "--system", "--no-create-home", USER],
                server=False,
            )

    def _as_server(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return self._run(argv, server=True)

    def _run(self, argv: list[str], *, server: bool) -> subprocess.CompletedProcess[str]:
        if (self.bin / argv[0]).is_file():
            argv = [str(self.bin / argv[0]), *argv[1:]]
        if server and os.geteuid() == 0:
            command = ["runuser", "-u", self.user, "--", *argv]
            argv = command
        env = {**os.environ, "LC_ALL": "C", "PGCONNECT_TIMEOUT": "10"}
        env.pop("PGPASSWORD", None)
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                cwd=self.root,
                env=env,
                timeout=START_TIMEOUT_S + 30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PostgresError(f"{' '.join(argv)}: {exc}{self._log_tail()}") from exc
        if result.returncode != 0:
            raise PostgresError(
                f"{' '.join(argv)} exited {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}{self._log_tail()}"
            )
        return result

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-20:]
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(lines) if lines else ""
