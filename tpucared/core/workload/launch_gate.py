"""What a launch needs that only the daemon can check, and why one must not start without it.

Where it sits: besides the probe of its workers, two facts decide whether a launch may start:

- every secret's variable (`WorkloadSpec.secrets`: name -> variable) is in the daemon's
  environment. The runner tells the planner which of them are there
  (`SlotProbe.secrets_present`: the variables' names, never their values);
- nothing of the previous attempt runs on the node: the cleanup before a new attempt left no
  worker unclean. The executor remembers the workers its last cleanup on a node could not
  clean (`SlotProbe.busy`: the TPU still held, the planner replaces the node;
  `SlotProbe.unclean`: every worker it could not clean, and why).

The planner (planner.py) decides on what the probe says: a secret missing is a hold and a
notice (`cannot_launch`); after an unclean cleanup the launch cleans the same attempt again
first, and its reason says why (`unclean_words`). The runtime's executor
(runtime/workload/executor.py) applies the same rules when it carries the launch out
(`refuse_secrets`, `refuse_after_cleanup`), because the environment may have changed since
the plan and the launch's own cleanup may leave a worker unclean: it then refuses and records
a `workload.launch_refused` event with the rule's words. So a launch never starts without its
secrets, nor beside what is left of the previous attempt.
"""

from __future__ import annotations

from collections.abc import Collection

from tpucared.core.model.specs import WorkloadSpec
from tpucared.core.workload.inputs import Unclean


def secrets_present(spec: WorkloadSpec, names: Collection[str]) -> frozenset[str]:
    """The variables of `spec.secrets` among `names` (the daemon's environment's names)."""
    return frozenset(var for var in spec.secrets.values() if var in names)


def missing_secrets(spec: WorkloadSpec, present: Collection[str]) -> tuple[str, ...]:
    """The variables of `spec.secrets` that `present` lacks, sorted."""
    return tuple(sorted({var for var in spec.secrets.values() if var not in present}))


def cannot_launch(
    spec: WorkloadSpec, present: Collection[str] | None, other: str | None = None
) -> str | None:
    """Why no launch can work now, for the plan's hold and notice: a secret's variable missing
    from the daemon's environment (`present`: None when not told), else `other` (what the
    runner found itself, e.g. `workload.files` missing on the daemon's disk), else None."""
    missing = missing_secrets(spec, present) if present is not None else ()
    if missing:
        return f"the daemon's environment lacks {', '.join(missing)} (workload.secrets)"
    return other


def unclean_words(unclean: Unclean) -> str:
    """`the cleanup of attempt 3 left worker(s) 1, 2 unclean (1: timeout; 2: refused)`."""
    workers = ", ".join(str(w) for w, _ in unclean.workers)
    whys = "; ".join(f"{w}: {why}" for w, why in unclean.workers)
    return f"the cleanup of attempt {unclean.attempt} left worker(s) {workers} unclean ({whys})"


def refuse_secrets(spec: WorkloadSpec, attempt: int, names: Collection[str]) -> str | None:
    """Why attempt `attempt` must not start with the daemon's environment as it is now
    (`names`), or None: the executor's check, whatever the plan knew."""
    why = cannot_launch(spec, names)
    return None if why is None else f"attempt {attempt} not launched: {why}"


def refuse_after_cleanup(attempt: int, unclean: Unclean | None) -> str | None:
    """Why attempt `attempt` must not start after the cleanup before it, or None when that
    cleanup left no worker unclean: the next probe tells the planner, which replaces the
    node (the TPU still held) or has the cleanup tried again (a worker not reached)."""
    if unclean is None:
        return None
    return f"attempt {attempt} not launched: {unclean_words(unclean)}"
