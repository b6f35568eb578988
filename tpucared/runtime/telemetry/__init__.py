"""What the daemon shows of itself while it runs.

- `server`       the small aiohttp server: /healthz, /metrics, /v1/status.
- `metrics`      the Prometheus families and `DaemonMetrics`, fed by the runtime.
- `slot_series`  the per-slot goodput series: kept per slot as they change, built when scraped.
- `endpoints`    `Telemetry`: wires the server and the metrics to the running daemon.
"""
