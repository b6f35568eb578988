"""Node decisions: one incarnation's lifecycle, and what the planner does about each node.

Called by `core/planning/planner.py` for every live incarnation and every listed resource;
reads and returns the words of `core/vocab/` (view, policy, actions, plan), walks the phase
table of `core/model/lifecycle.py`, never imports `core/planning/`.

- `cloud`           the cloud vocabulary the rules read besides `StateClass` and
                    `QueuedPhase` (which each cloud adapter assigns in its own tables):
                    health, the pseudo states stored in `cloud_state`.
- `incarnations`    one live incarnation + what the list shows of it -> its next steps, one
                    rule per phase (a PREEMPTED node's delete is decided here).
- `step`            what those rules share: the `Step` accumulating the actions, the moves
                    that end a node, facts / ownership (labels) / expiry (stuck) helpers.
- `strays`          listed resources that no live incarnation accounts for.
- `slots`           fleet and slot records, and which empty slots (and slices) get a create;
                    `delete_in_flight`: no create or delete under a name a delete may reach.
- `multislice`      a multislice slot's READY slices held while one is missing, released
                    after `multislice_hold`; one preemption counted per loss of the slot.
- `preemption`      a lost node's end worded by its cloud's preemption records, where its
                    adapter says its states do not say "preempted" (`CloudAbilities`,
                    core/model/abilities.py; Compute Engine); the runtime reads them.
- `flex`            a flex-start node's run end (its planned end, less a lag): neither a
                    preemption nor a failure; the slot asks again at once.
- `create_backoff`  a slot's backoff after failed creates, zone rotation, counters.
- `create_rate`     at most `creates_per_minute` creates sent in any 60 s per cloud API and
                    project (the runtime passes in when it sent the last minute's).
- `outcomes`        which phase a create/delete call's outcome belongs to (the runtime asks).
- `op_timing`       when to poll an operation first, from the zone's recent operations
                    (failing creates; deletes).
"""
