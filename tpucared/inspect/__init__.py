"""How tpucared shows what it knows: pure functions and small trackers over store records.

Nothing here does I/O (the `tpucared status` / `tpucared events` handlers, which open the
database read-only, are tpucared/cli/inspect.py). The same documents serve the CLI and the daemon's
HTTP endpoint (`tpucared.runtime.telemetry.server`), and the trackers feed the Prometheus metrics
(`tpucared.runtime.telemetry.metrics`).

- `fmt`: times, durations, truncation and plain-text tables.
- `status`: the `status --json` document (also `GET /v1/status`) and the status table.
- `leader`: which daemon leads (the leader lease), for both of the above.
- `events`: one readable line, or one JSON object, per event.
- `lifecycle`: reads the event log and derives preemptions, dead-to-delete and recovery
  latencies, and workload outcomes.
- `goodput`: integrates productive time per slot between snapshots.
- `ledger`: `tpucared goodput`'s figures (each slot's badput ledger, summed and priced) and its
  table and JSON document.
- `dbpath`: which database a read-only command opens.
"""
