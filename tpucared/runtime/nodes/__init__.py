"""The daemon's cloud side: carrying out node actions through each fleet's Cloud port
(tpucared/ports/cloud.py, held in runtime/clouds.py); nothing here names a cloud API.

- `observer`    the observe step: one list per (project, zone), all zones at once.
- `executor`    each node action in plan order, as core/vocab/actions.py says; intent first;
                runs of one kind written together (`records`: the record-only ones alone).
- `calls`       the create and delete calls, in the background, and their recorded outcomes;
                which deletes are in flight (the planner holds what they may reach).
- `preemptions` reads the cloud's preemption records for the nodes a plan lost, once per
                location, only in a tick with such a loss (core/nodes/preemption.py words the ends).
- `sweeps`      sweeps the shared resources (ports/cloud.py `SharedResources`) of a location
                after a multi-host node there is DELETED, at start and at the end of `down`
                (core/nodes/sweep.py says where), each in its own task.
- `operations`  polls every create/delete operation in flight, records its end, wakes the loop.
- `interrupted` at start, the calls a previous process left without an outcome: TRANSIENT.
"""
