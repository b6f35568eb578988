"""Targets for the SSH tests' servers: one per loopback address of a real sshd or a local host."""

from __future__ import annotations

from ssh_localhost import LocalWorkerHost
from ssh_sshd import OpenSshServer

from tpucared.ssh import Target


def targets_of(server: OpenSshServer | LocalWorkerHost, **kwargs: object) -> list[Target]:
    user = server.user if isinstance(server, OpenSshServer) else "tester"
    return [
        Target(worker=i, host=a, port=server.port, user=user, **kwargs)  # type: ignore[arg-type]
        for i, a in enumerate(server.addresses)
    ]
