"""The SSH launcher: running the workload on every worker of a slice, over tpucared/ssh/.

Where it sits: it implements the Launcher port (tpucared/ports/launcher.py) that the
runtime's workload side (runtime/workload/: runner, executor, notices) calls; below it,
tpucared/ssh/ is the transport (connections, the pool, host keys, the fan-out, uploads).
Nothing here decides anything: the core's rules do, from the values it answers with.
Modules, one job each:

    launcher      SshLauncher: the port's operations as fan-outs of the scripts below, each
                  worker's answer parsed; LaunchOptions, pool_size, why_failed
    by_hand       SshByHand: the ByHand port (`tpucared logs`, `exec`, `cp`) over a pool of
                  its own, from the workers' records only
    scripts       detached launch / probe / cleanup / notice wait / signal (sh/launch, run,
                  probe, cleanup, notice_wait, signal.sh): their values and their parsers
    provision     the secrets file, setup (sh/setup.sh)
    environment   the TPUCARED_* workload environment contract
    layout        where a slot's runs live on a worker, and each attempt's command
    shfiles       the scripts' text: sh/*.sh (with sh/lib.sh), read once, given their values
                  as $1, $2... by the transport's loader (tpucared/ssh/shfiles.py)
"""

from tpucared.launch.environment import SliceOf, workload_environment
from tpucared.launch.launcher import (
    FIRST_PROBE_RETRY,
    LaunchOptions,
    SshLauncher,
    pool_size,
    why_failed,
)
from tpucared.launch.provision import secrets_file_contents, setup_script
from tpucared.launch.scripts import (
    DEFAULT_DEVICE_PATTERNS,
    DEFAULT_LIBTPU_LOCKFILE,
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
from tpucared.ports.launcher import (
    CleanupResult,
    CleanupState,
    LaunchResult,
    LaunchState,
    NoticeResult,
    NoticeState,
    ProbeResult,
    RunState,
)

__all__ = [
    "DEFAULT_DEVICE_PATTERNS",
    "DEFAULT_LIBTPU_LOCKFILE",
    "FIRST_PROBE_RETRY",
    "CleanupResult",
    "CleanupState",
    "LaunchOptions",
    "LaunchResult",
    "LaunchState",
    "NoticeResult",
    "NoticeState",
    "ProbeResult",
    "RunState",
    "SliceOf",
    "SshLauncher",
    "cleanup_script",
    "launch_script",
    "log_tail_command",
    "notice_wait_script",
    "parse_cleanup",
    "parse_launch",
    "parse_notice_wait",
    "parse_probe",
    "pool_size",
    "probe_script",
    "secrets_file_contents",
    "setup_script",
    "signal_script",
    "why_failed",
    "workload_environment",
]
