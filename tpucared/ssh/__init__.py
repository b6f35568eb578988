"""The SSH layer: reaching every worker of every slice. Transport only.

Where it sits: the SSH launcher (tpucared/launch/, the Launcher port's implementation) runs
the workload through it, and `tpucared exec` / `cp` / `logs` (runtime/workload/by_hand.py,
through launch/by_hand.py) reach workers with it; nothing here knows what a workload is,
and nothing here decides anything. Modules, one job each:

    keys          the daemon's client key; the node `ssh-keys` metadata entry
    hostkeys      host key pinning per node incarnation (guest attributes or TOFU)
    target        Target: one worker, addressed for SSH
    connect       one authenticated, pinned connection
    pool          long-lived connections reused across ticks; global concurrency bound
    errors        SSH failures -> SshErrorKind (data for the planner)
    retry         per-worker retry policy (backoff + jitter) for the first minutes of a node
    fanout        run_on_all: one command on N workers -> list[WorkerResult]
    upload        files to N workers through stdin (sh/write_file.sh: atomic, size-checked)
    shell         quoting (ShellWord) and the marker-line protocol of remote scripts
    shfiles       a package's remote scripts (its sh/*.sh), read once, given their values as
                  $1, $2...: this package's write_file.sh, and the launcher's scripts
"""

from tpucared.ssh.connect import Connection, client_options, open_connection
from tpucared.ssh.errors import TRANSIENT_KINDS, SshErrorKind, classify
from tpucared.ssh.fanout import WorkerResult, run_on_all
from tpucared.ssh.hostkeys import (
    HostKeyMismatch,
    HostKeyPolicy,
    fingerprint,
    format_host_key,
    host_keys_from_guest_attributes,
    parse_host_key,
)
from tpucared.ssh.keys import (
    KeyFileError,
    add_ssh_keys_entry,
    ensure_client_key,
    openssh_public_key,
    ssh_keys_metadata_entry,
)
from tpucared.ssh.pool import ConnectionPool, Lease, PoolClosedError
from tpucared.ssh.retry import DEFAULT_RETRY, NEW_NODE_RETRY, NO_RETRY, RetryPolicy
from tpucared.ssh.shell import ScriptOutputError, path_expr, sh_command
from tpucared.ssh.target import Target, targets_for_node
from tpucared.ssh.upload import FileUpload, upload, write_file_script

__all__ = [
    "DEFAULT_RETRY",
    "NEW_NODE_RETRY",
    "NO_RETRY",
    "TRANSIENT_KINDS",
    "Connection",
    "ConnectionPool",
    "FileUpload",
    "HostKeyMismatch",
    "HostKeyPolicy",
    "KeyFileError",
    "Lease",
    "PoolClosedError",
    "RetryPolicy",
    "ScriptOutputError",
    "SshErrorKind",
    "Target",
    "WorkerResult",
    "add_ssh_keys_entry",
    "classify",
    "client_options",
    "ensure_client_key",
    "fingerprint",
    "format_host_key",
    "host_keys_from_guest_attributes",
    "open_connection",
    "openssh_public_key",
    "parse_host_key",
    "path_expr",
    "run_on_all",
    "sh_command",
    "ssh_keys_metadata_entry",
    "targets_for_node",
    "upload",
    "write_file_script",
]
