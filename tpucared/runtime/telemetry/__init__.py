"""What the daemon shows of itself while it runs.

- `server`     the small aiohttp server: /healthz, /metrics, /v1/status.
- `metrics`    the Prometheus families and `DaemonMetrics`, fed by the runtime.
- `endpoints`  `Telemetry`: wires the server and the metrics to the running daemon.
"""
