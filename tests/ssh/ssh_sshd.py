"""A real OpenSSH sshd on loopback addresses for the SSH layer's tests.

One sshd process listens on several 127.x.y.z addresses (same port), each standing in for one
worker VM of a slice. It runs with a private config, host keys generated per test session,
and an authorized_keys file holding the test client key; it logs in the user running the
tests (root in CI: sshd then needs /run/sshd for privilege separation).

Requires the Debian package `openssh-server` (for /usr/sbin/sshd and ssh-keygen comes with
`openssh-client`). A missing sshd fails the test that needs it, never skips it.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import free_port

SSHD = "/usr/sbin/sshd"


def require_sshd() -> None:
    if not os.access(SSHD, os.X_OK):
        raise RuntimeError(
            f"{SSHD} is missing: install the Debian package openssh-server "
            "(apt-get install -y openssh-server). The SSH tests need a real sshd."
        )
    if shutil.which("ssh-keygen") is None:
        raise RuntimeError("ssh-keygen is missing: install the Debian package openssh-client")


def generate_host_keys(directory: Path) -> dict[str, Path]:
    """ed25519 and ecdsa host keys (RSA generation is slow and adds nothing here)."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = {}
    for kind in ("ed25519", "ecdsa"):
        path = directory / f"ssh_host_{kind}_key"
        if not path.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(path)],
                check=True,
            )
        keys[kind] = path
    return keys


@dataclass
class OpenSshServer:
    directory: Path
    addresses: list[str]
    authorized_keys: list[str]
    host_keys: dict[str, Path]
    port: int = 0
    user: str = field(default_factory=getpass.getuser)
    extra_config: str = ""  # more sshd_config lines, e.g. an AuthorizedKeysCommand
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port(*self.addresses)

    def host_key(self, kind: str = "ed25519") -> str:
        """The public host key as 'type base64' (what the client should see or pin)."""
        algorithm, blob = self.host_keys[kind].with_suffix(".pub").read_text().split()[:2]
        return f"{algorithm} {blob}"

    @property
    def log_path(self) -> Path:
        return self.directory / "sshd.log"

    def start(self, timeout: float = 10.0) -> None:
        require_sshd()
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "authorized_keys").write_text("\n".join(self.authorized_keys) + "\n")
        config = self.directory / "sshd_config"
        # A clean home for the sessions: bash sources ~/.bashrc for commands run by sshd, and a
        # developer's rc (pyenv, conda init) would cost hundreds of ms per command.
        home = self.directory / "home"
        home.mkdir(exist_ok=True)
        listen = "\n".join(f"ListenAddress {a}:{self.port}" for a in self.addresses)
        hostkeys = "\n".join(f"HostKey {p}" for p in self.host_keys.values())
        config.write_text(
            f"""\
{listen}
{hostkeys}
PidFile {self.directory / "sshd.pid"}
AuthorizedKeysFile {self.directory / "authorized_keys"}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
MaxSessions 50
LogLevel VERBOSE
SetEnv HOME={home}
{self.extra_config}
"""
        )
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        log.close()
        deadline = time.monotonic() + timeout
        pending = list(self.addresses)
        while pending:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection((pending[0], self.port), timeout=0.5):
                    pending.pop(0)
            except OSError as exc:
                if time.monotonic() > deadline:
                    tail = self.log_path.read_text()[-2000:]
                    raise RuntimeError(f"sshd not listening: {tail}") from exc
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
