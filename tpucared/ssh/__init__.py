"""The SSH layer: reaching every worker of every slice, and running the workload there.

Where it sits: the runtime's executor turns planner actions (launch, probe, cleanup, setup,
copy) into calls of this package; nothing here decides anything. Modules, one job each:

    keys          the daemon's client key; the node `ssh-keys` metadata entry
    hostkeys      host key pinning per node incarnation (guest attributes or TOFU)
    target        Target: one worker, addressed for SSH
    connect       one authenticated, pinned connection
    pool          long-lived connections reused across ticks; global concurrency bound
    errors        SSH failures -> SshErrorKind (data for the planner)
    retry         per-worker retry policy (backoff + jitter) for the first minutes of a node
    fanout        run_on_all: one command on N workers -> list[WorkerResult]
    upload        files (and the secrets file) to N workers through stdin
    shell         quoting (ShellWord) and the marker-line protocol of the remote scripts
    shfiles       the remote scripts' text: sh/*.sh, read once, given their values as $1, $2...
    scripts       detached launch / probe / cleanup (sh/launch, run, probe, cleanup.sh), parsers
    provision     setup (sh/setup.sh), secrets file, atomic file write (sh/write_file.sh)
    environment   the TPUCARED_* workload environment contract
"""

from tpucared.ssh.connect import Connection, client_options, open_connection
from tpucared.ssh.environment import SliceOf, workload_environment
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
from tpucared.ssh.provision import secrets_file_contents, setup_script, write_file_script
from tpucared.ssh.retry import DEFAULT_RETRY, NEW_NODE_RETRY, NO_RETRY, RetryPolicy
from tpucared.ssh.scripts import (
    DEFAULT_DEVICE_PATTERNS,
    DEFAULT_LIBTPU_LOCKFILE,
    CleanupResult,
    CleanupState,
    LaunchResult,
    LaunchState,
    NoticeResult,
    NoticeState,
    ProbeResult,
    RunState,
    cleanup_script,
    launch_script,
    log_tail_command,
    notice_wait_script,
    parse_cleanup,
    parse_launch,
    parse_notice_wait,
    parse_probe,
    probe_script,
    signal_script,
)
from tpucared.ssh.shell import ScriptOutputError, path_expr, sh_command
from tpucared.ssh.target import Target, targets_for_node
from tpucared.ssh.upload import FileUpload, upload

__all__ = [
    "DEFAULT_DEVICE_PATTERNS",
    "DEFAULT_LIBTPU_LOCKFILE",
    "DEFAULT_RETRY",
    "NEW_NODE_RETRY",
    "NO_RETRY",
    "TRANSIENT_KINDS",
    "CleanupResult",
    "CleanupState",
    "Connection",
    "ConnectionPool",
    "FileUpload",
    "HostKeyMismatch",
    "HostKeyPolicy",
    "KeyFileError",
    "LaunchResult",
    "LaunchState",
    "Lease",
    "NoticeResult",
    "NoticeState",
    "PoolClosedError",
    "ProbeResult",
    "RetryPolicy",
    "RunState",
    "ScriptOutputError",
    "SliceOf",
    "SshErrorKind",
    "Target",
    "WorkerResult",
    "add_ssh_keys_entry",
    "classify",
    "cleanup_script",
    "client_options",
    "ensure_client_key",
    "fingerprint",
    "format_host_key",
    "host_keys_from_guest_attributes",
    "launch_script",
    "log_tail_command",
    "notice_wait_script",
    "open_connection",
    "openssh_public_key",
    "parse_cleanup",
    "parse_host_key",
    "parse_launch",
    "parse_notice_wait",
    "parse_probe",
    "path_expr",
    "probe_script",
    "run_on_all",
    "secrets_file_contents",
    "setup_script",
    "sh_command",
    "signal_script",
    "ssh_keys_metadata_entry",
    "targets_for_node",
    "upload",
    "workload_environment",
    "write_file_script",
]
