"""The values every layer of tpucared shares; plain frozen dataclasses and enums.

- `specs`      what the user asked for: `FleetSpec`, `WorkloadSpec`, labels, capacity and
               restart kinds, the error kinds the planner decides on.
- `machines`   Compute Engine's TPU machine types a `compute` fleet may name: chips, the
               default boot image of their generation.
- `observed`   what the cloud shows, as the gcp layer converts it: `ObservedNode`,
               `ObservedQueuedResource`, `ZoneObservation`, `StateClass`.
- `records`    what the store remembers: fleets, slots, incarnations (`NodePhase`), workers,
               workload and create attempts, events.
- `lifecycle`  the incarnation lifecycle (`NodePhase`) as a transition table, checked by the
               store on every write; the LIVE / PENDING / SERVING phase sets.
- `retention`  which ended records the maintenance task may forget.
- `durations`  "30s" / "10m" / "1h30m" <-> timedelta.
- `backoff`    `Backoff`, the one backoff rule type (planner, REST and SSH retries, operation
               polling): capped exponential with a jittered share, as pure arithmetic.
- `retry`      `RetryRule`, the one retry rule of one request at the adapters' edge (REST
               client, SSH fan-out, webhook sender), and `retry_after_seconds`, the one
               reading of a server's Retry-After.
"""
