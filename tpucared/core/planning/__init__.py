"""Planning one tick: from a snapshot of the world to an ordered plan of actions.

- `snapshot`           what the store remembers, as the planner needs it, one value per tick.
- `view`               the read-only indexes over specs, records and observations for a tick.
- `policy`             the planner's tunables: budgets, backoffs, graces, stuck timeouts.
- `actions`            the node actions and the contract the executor honours for each.
- `plan`               the planner's output: actions, holds, notices.
- `planner`            `plan`: the node planner's entry point (slots, incarnations, strays).
- `tick`               `plan_tick`: what the daemon calls each tick; the node plan, then the
                       workload planner on top of it.
- `quiet`              whether a tick woken only by a backoff's end or a stockout may plan on
                       the previous lists instead of listing again.
- `zone_health`        whether each zone can be listed: when `zone.unreachable` is told,
                       which fleets /healthz reports.
- `executor_contract`  the record-level effect of a plan as a pure function: the executor's
                       contract, executable (the tests check the real executor against it).
"""
