"""deploy/prometheus and deploy/grafana: the alert rules pass `promtool check rules` and their
own unit tests (`promtool test rules`), the dashboard is a well-formed Grafana model, and every
tpucared metric either names is one the daemon serves and docs/metrics.md documents.

promtool comes from Debian's `prometheus` package, which `.ci/run` installs: a machine without
it fails here, it does not skip."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tpucared.runtime.telemetry.metrics import DaemonMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "tpucared-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tpucared-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tpucared-dashboard.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
PROMTOOL = "promtool"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert shutil.which(PROMTOOL), "promtool is missing: apt-get install prometheus (.ci/run)"
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def test_the_rules_pass_promtool_check() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_the_alerts_fire_when_they_should_and_not_before() -> None:
    done = _promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for g in groups for rule in g["rules"]]


def test_every_alert_says_what_to_do() -> None:
    for rule in _alerts():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert len(rule["annotations"]["description"]) > 40, rule["alert"]


def _dashboard() -> dict[str, Any]:
    model: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return model


def test_the_dashboard_is_a_grafana_model() -> None:
    model = _dashboard()
    assert model["uid"] == "tpucared"
    assert model["schemaVersion"] >= 36
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["fleet"]["query"]["query"] == "label_values(tpucared_slots, fleet)"
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in model["panels"]:
        assert panel["title"]
        assert panel["type"] in {"timeseries", "stat"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
            assert target["expr"].strip()
        g = panel["gridPos"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def _names_used() -> dict[str, set[str]]:
    """Every tpucared_* series name in an alert's or a panel's expression -> where."""
    exprs = [(r["alert"], r["expr"]) for r in _alerts()]
    exprs += [(p["title"], t["expr"]) for p in _dashboard()["panels"] for t in p["targets"]]
    exprs += [("fleet variable", _dashboard()["templating"]["list"][1]["definition"])]
    used: dict[str, set[str]] = {}
    for where, expr in exprs:
        for name in re.findall(r"\btpucared_[a-z_]+", expr):
            used.setdefault(name, set()).add(where)
    return used


def _served() -> dict[str, str]:
    """The series names /metrics serves (what the daemon's registry renders) -> the family."""
    out = {}
    for family in DaemonMetrics().registry.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
        }.get(family.type, ("",))
        for suffix in suffixes:
            out[family.name + suffix] = family.name
    return out


def test_every_metric_used_exists_and_is_documented() -> None:
    used = _names_used()
    assert len(used) >= 10  # the parse found the expressions
    served = _served()
    doc = METRICS_DOC.read_text()
    for name, where in sorted(used.items()):
        assert name in served, f"{name} (used by {sorted(where)}) is not a metric tpucared serves"
        family = served[name]
        documented = family + ("_total" if f"`{family}_total`" in doc else "")
        assert f"`{documented}`" in doc, f"{name} is not documented in docs/metrics.md"
