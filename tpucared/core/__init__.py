"""Pure decisions: what tpucared should do, computed from values, never from I/O.

The runtime hands the planner a snapshot (specs, what the cloud lists, what the store
remembers, now) and gets back a plan of actions, each with a human reason. Nothing in this
package performs I/O, reads a clock or draws a random number; the import-linter contracts in
pyproject.toml and tests/core/test_purity.py enforce it. The rooms, in the order a tick uses them:

- `model/`     the values every layer shares: specs (what the user asked for), observations
               (what the cloud lists), records (what the store remembers) and their phase
               table, durations, backoff, the adapters' retry rule.
- `vocab/`     the words the planners share: the snapshot, the action types and the
               executor's contract for each, the plan, the planner's tunables and stuck
               timeouts.
- `view.py`    the read-only indexes over one tick's specs, records and observations
               (`View`), which every sub-planner reads.
- `planning/`  one tick's plan: the entry points `planner.plan` (nodes) and `tick.plan_tick`
               (nodes, then workloads), the execution budget's cut, zone health.
- `nodes/`     node decisions: what a cloud state means, one incarnation's next step (a
               preempted node's delete is decided in `nodes/incarnations.py`), strays, slots
               and their create backoff.
- `workload/`  workload decisions: the attempt lifecycle, judging a probe of the workers, the
               next step (launch, stop, relaunch: `workload/planner.py`), the runner's actions.
- `notify/`    the `[[notify]]` webhooks: what they ask for, and which news a person must hear.
- `leadership/` the leader lease: which of several daemons on one database may act, and when.
"""
