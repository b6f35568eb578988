"""The preflight: `tpucared check -c fleet.toml`, will this config work on this project?

Owns the read-only questions asked of Google (or the emulator) before a daemon relies on the
answers: the credentials and the account they act as; each project exists and has the TPU
and Compute Engine APIs enabled; the IAM permissions each fleet needs (one list,
permissions.py, printed in deploy/README.md); each fleet's accelerator or machine type in each
zone, its runtime version or boot image, network, subnetwork, service account, reservation and
data disks, and where they are; the regional quotas and how many nodes they leave room for;
what the [guard] allows. Nothing is created, changed or deleted.

Sits beside inspect/ and launch/: it imports gcp/ (the REST request path) and config/; the CLI
(cli/check.py) prints its results and the daemon (runtime/daemon.py) runs the same checks in
the background at start and logs each WARN and FAIL (`check.warned`, `check.failed`).

- `results.py`  `CheckResult` (ok / WARN / FAIL, detail, fix), lines, JSON, exit status;
- `permissions.py`  the permissions each fleet needs, by group;
- `rules.py`    what the config and the answers mean (pure): paths, regions, quota metrics;
- `client.py`   `PreflightClient`: the read calls, each API's URL (Google's or the emulator's);
- `checks.py`   the checks, one small async function each;
- `run.py`      which checks a config needs, each under its deadline, all at once.
"""

from tpucared.preflight.results import CheckResult, Status, exit_code, render, to_json
from tpucared.preflight.run import check_config, log_results, run_checks, start_checks

__all__ = [
    "CheckResult",
    "Status",
    "check_config",
    "exit_code",
    "log_results",
    "render",
    "run_checks",
    "start_checks",
    "to_json",
]
