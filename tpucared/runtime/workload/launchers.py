"""Which launcher runs the daemon's workloads: where the runtime names an implementation of
the Launcher port (tpucared/ports/launcher.py), and the only place.

Owns `ssh_launcher`: the SSH launcher (tpucared/launch/) with the daemon's client key, the
login and pool's bound from `[ssh]`, and the host keys pinned per incarnation by `WorkerHosts`
(hosts.py, the port's `HostKeys`); `ssh_launcher_for` makes it from the config, reading (or
making) `[ssh] key`. `WorkloadRunner.from_config` uses it unless it is given another launcher
(a test's, or a new kind: see README.md, "where things are decided and done"). `by_hand_for`:
what `tpucared logs`, `exec` and `cp` reach the workers with (by_hand.py; the `ByHand` port's
SSH implementation, tpucared/launch/by_hand.py). And `guest_attribute_host_keys`, the fetcher
the daemon gives `WorkerHosts`: what the node's cloud publishes of its workers' host keys
(`Cloud.host_keys`, the TPU API's guest attributes), as the SSH transport validates them.

A wiring module (with runtime/clouds.py and runtime/startup.py): import-linter's "the runtime
talks to ports" contract lets only these name tpucared/ssh, tpucared/launch and asyncssh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import asyncssh

from tpucared.config import Config, SshConfig
from tpucared.core.model.records import IncarnationRecord
from tpucared.launch import LaunchOptions, SshLauncher
from tpucared.launch.by_hand import SshByHand
from tpucared.ports.cloud import PublishedHostKeys
from tpucared.ports.launcher import ByHand
from tpucared.runtime.clouds import CloudMap
from tpucared.runtime.workload.hosts import HostKeyFetcher, WorkerHosts
from tpucared.ssh import host_keys_from_guest_attributes
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
    return SshLauncher(
        key,
        WorkerHosts(store, fetch_host_keys),
        user=ssh.user,
        port=ssh.port,
        internal_ip=ssh.internal_ip,
        concurrency=ssh.concurrency,
        options=options,
    )


def ssh_launcher_for(
    config: Config, store: Store, *, fetch_host_keys: HostKeyFetcher | None = None
) -> SshLauncher:
    """The daemon's SSH launcher, with `[ssh] key` (made if missing). Blocking (reads the key
    file): call it at start-up."""
    key = ensure_client_key(config.ssh.key)
    return ssh_launcher(store, config.ssh, key, fetch_host_keys=fetch_host_keys)


def by_hand_for(config: Config) -> ByHand:
    """What a person's commands reach the workers with: SSH with `[ssh]`'s login and key
    (read when a command connects, never made)."""
    ssh = config.ssh
    return SshByHand(
        ssh.key,
        user=ssh.user,
        port=ssh.port,
        internal_ip=ssh.internal_ip,
        concurrency=ssh.concurrency,
    )


def guest_attribute_host_keys(clouds: CloudMap, project: str) -> HostKeyFetcher:
    """A fetcher reading what the node's cloud publishes of each worker's host keys
    (`Cloud.host_keys`), in the node's project (`project`, the daemon's own, for a record
    that names none)."""

    async def fetch(inc: IncarnationRecord) -> Mapping[int, Sequence[str]]:
        cloud = clouds.for_node(inc)
        return pins_from(await cloud.host_keys(inc.project or project, inc.zone, inc.node_name))

    return fetch


def pins_from(published: PublishedHostKeys) -> dict[int, tuple[str, ...]]:
    """{worker: pins} from what the cloud publishes; workers without keys are left out."""
    out: dict[int, tuple[str, ...]] = {}
    for index, pairs in published.items():
        keys = host_keys_from_guest_attributes([(k, v) for k, v in pairs if k and v])
        if keys:
            out[index] = keys
    return out
