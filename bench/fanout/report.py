"""The fan-out benchmark's result: one row per fleet, size, command and method, the
verdicts against the target, and the table printed after a run."""

from __future__ import annotations

from typing import Any

from bench import common
from bench.fanout.measurement import Row
from bench.fanout.settings import TARGET_SECONDS, TARGET_WORKERS


def result_row(row: Row, rows: list[Row]) -> dict[str, Any]:
    same = [
        r for r in rows if (r.fleet, r.workers, r.command) == (row.fleet, row.workers, row.command)
    ]
    pssh = [r for r in same if r.method == "parallel-ssh" and r.median() is not None]
    median = row.median()
    # The reference: parallel-ssh with OpenSSH's defaults at the same effective concurrency.
    effective = min(row.concurrency or 64, row.workers)
    reference = next(
        (
            r.median()
            for r in pssh
            if r.kex is None and min(r.concurrency or 0, r.workers) == effective
        ),
        None,
    )
    best = min((m for r in pssh if (m := r.median()) is not None), default=None)
    return {
        "fleet": row.fleet,
        "workers": row.workers,
        "command": row.command,
        "method": row.method,
        "concurrency": row.concurrency,
        "kex": row.kex,
        "label": row.label,
        "extrapolated_from": row.extrapolated_from,
        "runs": len(row.runs),
        "all_workers_ok": all(r.ok_workers == row.workers for r in row.runs) if row.runs else None,
        "ok_workers_min": min((r.ok_workers for r in row.runs), default=None),
        "median_s": None if median is None else round(median, 4),
        "seconds": common.summarize([r.seconds for r in row.runs]),
        "client_cpu_s": common.summarize([r.client_cpu_s for r in row.runs], 3),
        "server_cpu_s": common.summarize([r.server_cpu_s for r in row.runs], 3),
        "retried_workers_max": max((r.retried_workers for r in row.runs), default=None),
        "errors": sorted({e for r in row.runs for e in r.errors})[:5],
        "ratio_vs_parallel_ssh_same_p": common.ratio(median, reference),
        "ratio_vs_best_parallel_ssh": common.ratio(median, best),
    }


def verdicts(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The target, per fleet and command, at the largest size measured: tpucared's best cold
    fan-out against 5 s and against the best parallel-ssh variant (classic kex included)."""
    out = []
    for fleet, command in sorted({(r["fleet"], r["command"]) for r in results}):
        mine = [r for r in results if (r["fleet"], r["command"]) == (fleet, command)]
        workers = max(r["workers"] for r in mine)
        at = [r for r in mine if r["workers"] == workers and r["median_s"] is not None]

        def best(method: str, rows: list[dict[str, Any]] = at) -> dict[str, Any] | None:
            chosen = min(
                (r for r in rows if r["method"] == method),
                key=lambda r: r["median_s"],
                default=None,
            )
            return chosen and {"label": chosen["label"], "median_s": chosen["median_s"]}

        default = next(
            (r["median_s"] for r in at if r["method"] == "tpucared" and r["concurrency"] == 64),
            None,
        )
        tpucared, pssh = best("tpucared"), best("parallel-ssh")
        out.append(
            {
                "fleet": fleet,
                "command": command,
                "workers": workers,
                "tpucared_default_median_s": default,
                "tpucared_best": tpucared,
                "tpucared_warm": best("tpucared-warm"),
                "parallel_ssh_best": pssh,
                "within_5_s": (
                    None
                    if workers != TARGET_WORKERS or tpucared is None
                    else tpucared["median_s"] <= TARGET_SECONDS
                ),
                "faster_than_parallel_ssh": (
                    None
                    if tpucared is None or pssh is None
                    else tpucared["median_s"] < pssh["median_s"]
                ),
            }
        )
    return out


def render(result: dict[str, Any], *, markdown: bool = False) -> str:
    headers = [
        "fleet",
        "N",
        "command",
        "method",
        "runs",
        "ok",
        "median s",
        "p99 s",
        "min s",
        "max s",
        "client CPU s",
        "server CPU s",
        "vs pssh same -p",
    ]
    rows = []
    for r in result["results"]:
        s = r["seconds"]
        extrapolated = r["extrapolated_from"] is not None
        rows.append(
            [
                r["fleet"],
                str(r["workers"]),
                r["command"],
                r["label"],
                str(r["runs"]) if not extrapolated else "-",
                ("yes" if r["all_workers_ok"] else f"NO (min {r['ok_workers_min']})")
                if not extrapolated
                else "-",
                ("~" + common.format_seconds(r["median_s"]))
                if extrapolated
                else common.format_seconds(r["median_s"]),
                common.format_seconds(s.get("p99")),
                common.format_seconds(s.get("min")),
                common.format_seconds(s.get("max")),
                common.format_seconds(r["client_cpu_s"].get("median")),
                common.format_seconds(r["server_cpu_s"].get("median")),
                common.format_ratio(r["ratio_vs_parallel_ssh_same_p"]),
            ]
        )
    lines = [common.table(headers, rows, markdown=markdown), ""]
    for v in result["verdicts"]:
        lines.append(_verdict_line(v))
    return "\n".join(lines)


def _verdict_line(v: dict[str, Any]) -> str:
    """One fleet/command's verdict; a question not measured in this run is left out (the
    5 s target is judged at TARGET_WORKERS only)."""

    def said(best: dict[str, Any] | None) -> str:
        if best is None:
            return "not measured"
        return f"{common.format_seconds(best['median_s'])} s ({best['label']})"

    line = (
        f"{v['fleet']} {v['command']} at {v['workers']} workers: best tpucared "
        f"{said(v['tpucared_best'])} vs best parallel-ssh {said(v['parallel_ssh_best'])}"
    )
    if v["within_5_s"] is not None:
        verdict = "within" if v["within_5_s"] else "NOT within"
        line += f"; {verdict} {TARGET_SECONDS:g} s at {TARGET_WORKERS} workers"
    if v["faster_than_parallel_ssh"] is not None:
        line += (
            "; faster than parallel-ssh"
            if v["faster_than_parallel_ssh"]
            else ("; slower than parallel-ssh")
        )
    return line
