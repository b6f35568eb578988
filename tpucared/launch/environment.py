"""The workload environment contract: the TPUCARED_* variables every worker's process gets.

Owns `workload_environment()`, which merges the fleet's `env` with the contract variables for
one worker of one attempt (`SliceOf`, a worker's place in a multislice job, is a value of the
Launcher port: tpucared/ports/launcher.py). The SSH launcher passes the result to
`scripts.launch_script`; another launcher gives its workload the same variables. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpucared.ports.launcher import MEGASCALE_PORT, SliceOf
from tpucared.ssh.shell import check_env_name, check_env_value

CONTRACT_PREFIX = "TPUCARED_"

__all__ = ["CONTRACT_PREFIX", "MEGASCALE_PORT", "SliceOf", "workload_environment"]


def workload_environment(
    *,
    fleet: str,
    slot: int,
    node: str,
    worker: int,
    num_workers: int,
    run_id: str,
    attempt: int,
    preemptions: int,
    failures: int,
    env: Mapping[str, str] | None = None,
    slice_of: SliceOf | None = None,
) -> dict[str, str]:
    """User `env` plus the contract variables (README.md, "Workload environment").

    A user variable named TPUCARED_* is rejected: it would silently shadow or be shadowed by
    the contract. `slice_of`: the worker's slice of a multislice job (TPUCARED_SLICE,
    TPUCARED_NUM_SLICES and the MEGASCALE_* variables JAX multislice reads); a user's own
    MEGASCALE_* in `env` yields to it.
    """
    if not 0 <= worker < num_workers:
        raise ValueError(f"worker {worker} out of range for {num_workers} workers")
    result: dict[str, str] = {}
    for name, value in (env or {}).items():
        if name.startswith(CONTRACT_PREFIX):
            raise ValueError(f"{name}: the TPUCARED_ prefix is reserved for tpucared")
        result[check_env_name(name)] = check_env_value(name, value)
    result.update(
        {
            "TPUCARED_FLEET": fleet,
            "TPUCARED_SLOT": str(slot),
            "TPUCARED_NODE": node,
            "TPUCARED_WORKER": str(worker),
            "TPUCARED_NUM_WORKERS": str(num_workers),
            "TPUCARED_RUN_ID": run_id,
            "TPUCARED_ATTEMPT": str(attempt),
            "TPUCARED_PREEMPTIONS": str(preemptions),
            "TPUCARED_FAILURES": str(failures),
            # A single-slice job is slice 0 of 1 (no MEGASCALE_*: JAX would wait for peers).
            "TPUCARED_SLICE": "0",
            "TPUCARED_NUM_SLICES": "1",
        }
    )
    if slice_of is not None:
        result.update(slice_of.variables())
    return result
