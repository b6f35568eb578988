"""Which launcher runs the daemon's workloads: where the runtime names an implementation of
the Launcher port (tpucared/ports/launcher.py), and the only place.

Owns `ssh_launcher`: the SSH launcher (tpucared/launch/) with the daemon's client key, the
pool's bound from `[ssh]`, and the host keys pinned per incarnation by `WorkerHosts`
(hosts.py); `ssh_launcher_for` makes it from the config, reading (or making) `[ssh] key`.
`WorkloadRunner.from_config` uses it unless it is given another launcher (a test's, or a new
kind: see README.md, "where things are decided and done").
"""

from __future__ import annotations

import asyncssh

from tpucared.config import Config, SshConfig
from tpucared.launch import LaunchOptions, SshLauncher
from tpucared.runtime.workload.hosts import HostKeyFetcher, WorkerHosts
from tpucared.ssh.keys import ensure_client_key
from tpucared.store import Store


def ssh_launcher(
    store: Store,
    ssh: SshConfig,
    key: asyncssh.SSHKey,
    *,
    fetch_host_keys: HostKeyFetcher | None = None,
    options: LaunchOptions | None = None,
) -> SshLauncher:
    """The SSH launcher over one long-lived pool (closed by `close()`)."""
    hosts = WorkerHosts(store, ssh, fetch_host_keys)
    return SshLauncher(key, hosts, concurrency=ssh.concurrency, options=options)


def ssh_launcher_for(
    config: Config, store: Store, *, fetch_host_keys: HostKeyFetcher | None = None
) -> SshLauncher:
    """The daemon's SSH launcher, with `[ssh] key` (made if missing). Blocking (reads the key
    file): call it at start-up."""
    key = ensure_client_key(config.ssh.key)
    return ssh_launcher(store, config.ssh, key, fetch_host_keys=fetch_host_keys)
