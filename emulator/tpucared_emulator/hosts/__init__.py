"""Simulated worker hosts: each worker of a READY node is a real SSH server on its own address.

The emulator's `WorkerHosts` implementation (see host_hook.py for the hook). The DESIGN contract:
"Each worker of a READY node is a real SSH server on its own loopback address (127.x.y.z, the
port from the emulator's options) that runs commands as local processes; preemption kills those
processes and closes the server." Modules:

    manager     SshWorkerHosts: start/stop/close per node, directories, wedge (fault injection)
    worker      SimulatedWorker: one asyncssh server, its exec sessions and processes
    keys        who may log in: the node's `ssh-keys` metadata, re-read on every login
    processes   finding and killing a worker's processes by environment tag, detached included

Enabled by `EmulatorOptions.ssh_hosts` (`tpucared emulator` turns it on by default).
"""

from tpucared_emulator.hosts.keys import authorized_keys, is_authorized
from tpucared_emulator.hosts.manager import HostStartError, SshWorkerHosts
from tpucared_emulator.hosts.processes import TAG_HOSTS, TAG_NODE, TAG_WORKER, find_tagged

__all__ = [
    "TAG_HOSTS",
    "TAG_NODE",
    "TAG_WORKER",
    "HostStartError",
    "SshWorkerHosts",
    "authorized_keys",
    "find_tagged",
    "is_authorized",
]
