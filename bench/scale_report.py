"""The scale benchmark's report: the table of measured sizes, one progress line per size, and
the daemon's profile (for `--profile`). bench/scale.py measures; this only formats."""

from __future__ import annotations

import pstats
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import common

# ---------------------------------------------------------------------------------------------
# Output

HEADERS = [
    "nodes", "variant", "tick p50 ms", "tick p99 ms", "CPU ms/tick", "RSS MB", "peak MB",
    "API req/tick", "list pages", "DB MB", "emulator CPU ms/tick", "workers probed/tick",
    "list p50 ms", "plan p50 ms", "read p50 ms", "steal %",
]  # fmt: skip


def row_cells(row: Mapping[str, Any]) -> list[str]:
    tick = row["tick_s"]
    api = row["api_requests"]
    return [
        str(row["nodes"]),
        row["variant"],
        f"{tick['median'] * 1000:.0f}",
        f"{tick['p99'] * 1000:.0f}",
        f"{row['cpu_ms_per_tick']:.0f}",
        f"{row['memory']['rss_mb']:.0f}",
        f"{row['memory']['peak_rss_mb']:.0f}",
        f"{api['per_tick']:g}",
        str(api["list_pages_per_tick"]),
        f"{row['db']['total_mb']:.1f}",
        f"{row['emulator_cpu_ms_per_tick']:.0f}",
        f"{row['probes']['workers_per_tick']:g}",
        *(_median_ms(row.get(f"tick_{phase}_s")) for phase in ("list", "plan", "read")),
        "-" if row.get("cpu_steal_share") is None else f"{row['cpu_steal_share'] * 100:.0f}",
    ]


def _median_ms(summary: Mapping[str, Any] | None) -> str:
    return "-" if summary is None else f"{summary['median'] * 1000:.0f}"


def render_row(row: Mapping[str, Any]) -> str:
    """One measured size as a progress line (`render` prints the table of all of them)."""
    cells = dict(zip(HEADERS, row_cells(row), strict=True))
    line = f"scale {cells.pop('variant')} n={cells.pop('nodes')}: " + ", ".join(
        f"{name} {value}" for name, value in cells.items()
    )
    storm = row.get("storm")
    if storm:
        delay = storm["delete_delay_s"] or {}
        line += (
            f"; storm: {storm['preempted']} preempted in {storm['storm_s']} s, DELETE after "
            f"median {delay.get('median')} s / p90 {delay.get('p90')} s "
            f"({storm['delete_missing']} without), all READY {storm['recovery_s']} s after it "
            f"({storm['creates_per_minute_recovering']} creates a minute)"
        )
    return line


def render(result: Mapping[str, Any]) -> str:
    out = common.table(HEADERS, [row_cells(r) for r in result["results"]])
    for failure in result.get("failures", []):
        out += f"\nFAILED {failure['variant']} n={failure['nodes']}: {failure['error'][:300]}"
    return out


def profile_top(path: Path, limit: int = 45) -> list[str]:
    """The daemon's main-thread profile over the window, by cumulative and by own time."""
    import io

    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("cumulative").print_stats(limit)
    stats.sort_stats("tottime").print_stats(limit)
    return out.getvalue().splitlines()
