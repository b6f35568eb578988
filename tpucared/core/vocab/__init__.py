"""The words both planners speak: what a tick reads, the actions it returns, the tunables.

Below `core/planning/` (which composes a tick) and the sub-planners of `core/nodes/` and
`core/workload/` (which decide), above `core/model/` (the shared values); nothing here imports
any of the three, so the planners import it and never each other in a circle.

- `snapshot`  what the store remembers, as the planner needs it: one value per tick
              (`PlannerSnapshot`, and `PlainSnapshot` for tests and tools).
- `policy`    the planner's tunables: budgets, backoffs, graces, stuck timeouts.
- `stuck`     timeouts for states that should end by themselves, as one table (`policy`
              holds the effective values).
- `actions`   the node actions and the contract the executor honours for each.
- `plan`      the planner's output: actions, holds, notices.

The node-incarnation phase table they use (`NodePhase` edges, LIVE / PENDING / SERVING) is
`core/model/lifecycle.py`, next to the records it is about.
"""
