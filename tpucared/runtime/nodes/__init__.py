"""The daemon's cloud side: carrying out node actions against the TPU API.

- `observer`    the observe step: one paginated list per (project, zone), all zones at once.
- `executor`    each node action in plan order, as core/vocab/actions.py says; intent first.
- `calls`       the create and delete calls, in the background, and their recorded outcomes.
- `operations`  polls every create/delete operation in flight, records its end, wakes the loop.
"""
