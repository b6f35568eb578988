"""`/metrics` scraped during a running demo: the documented families carry real values.

The demo serves the daemon's HTTP endpoints on the port its banner prints. Once its first
injected preemption has been handled (the replacement READY), the scrape must show the node
gauges, preemptions, create attempts, API requests, tick durations and recovery latency with
non-zero values, parsed with prometheus_client's own text parser.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _scrape(port: int) -> dict[str, float]:
    """Every sample as `name{labels}` -> value (labels sorted)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    return samples


def _total(samples: dict[str, float], name: str, **labels: str) -> float:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        v
        for key, v in samples.items()
        if key.split("{", 1)[0] == name and all(w in key for w in wanted)
    )


def test_metrics_during_the_demo_show_what_happened() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "tpucared", "demo", "--duration", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = None
        deadline = time.monotonic() + 180
        seen_dead = False
        for line in proc.stdout:
            assert time.monotonic() < deadline, "the demo never replaced a preempted node"
            if port is None and (m := re.search(r"status\s+http://127\.0\.0\.1:(\d+)/", line)):
                port = int(m[1])
            seen_dead = seen_dead or bool(re.search(r"demo/0\s+demo-0\s+node\.dead", line))
            if seen_dead and re.search(r"demo/0\s+demo-0\s+node\.ready", line):
                break
        assert port is not None, "the demo's banner names no status URL"
        samples = _scrape(port)
        # Give the metrics one refresh after the READY event (they refresh every tick).
        end = time.monotonic() + 20
        while _total(samples, "tpucared_recovery_seconds_count") < 1 and time.monotonic() < end:
            time.sleep(0.5)
            samples = _scrape(port)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0

    assert _total(samples, "tpucared_build_info") == 1
    assert _total(samples, "tpucared_nodes", fleet="demo", phase="ready") >= 1
    assert _total(samples, "tpucared_preemptions_total", fleet="demo") >= 1
    assert _total(samples, "tpucared_create_attempts_total", outcome="ok") >= 2
    assert _total(samples, "tpucared_api_requests_total", call="nodes.list") > 0
    assert _total(samples, "tpucared_api_requests_total", call="nodes.delete") >= 1
    assert _total(samples, "tpucared_tick_seconds_count") > 0
    assert _total(samples, "tpucared_last_tick_timestamp_seconds") > 0
    assert _total(samples, "tpucared_recovery_seconds_count", fleet="demo") >= 1
    assert _total(samples, "tpucared_workload_attempts_total", outcome="preempted") >= 1
    assert _total(samples, "tpucared_slot_wall_seconds_total") > 0
