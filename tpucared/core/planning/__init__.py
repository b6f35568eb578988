"""Planning one tick: from a snapshot of the world to an ordered plan of actions.

The top of the core: it composes the node sub-planners (`core/nodes/`) and the workload
sub-planner (`core/workload/`), which never import this package: the words they share
(snapshot, policy, actions, plan) are `core/vocab/`'s, the tick's read-only view
`core/view.py`.

- `planner`            `plan`: the node planner's entry point (slots, incarnations, strays).
- `tick`               `plan_tick`: what the daemon calls each tick; the node plan, then the
                       workload planner on top of it.
- `quiet`              whether a tick woken only by a backoff's end or a stockout may plan on
                       the previous lists instead of listing again.
- `zone_health`        whether each zone can be listed: when `zone.unreachable` is told,
                       which fleets /healthz reports.
- `drift`              nodes made otherwise than their fleet's spec asks now.
- `stockout`           which slots wait for capacity: the rule of `status` and of the
                       stockout news.
- `down`               when `tpucared down` is done: the rule its loop stops on.
- `budget`             where a plan's execution stops when its time budget runs out (the
                       creates still run).

The executor's contract as a pure function (the record-level effect of a plan) is a test
oracle: tests/core/planning/executor_contract.py.
"""
