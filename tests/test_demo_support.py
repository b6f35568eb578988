"""Helpers (no tests) for tests/test_demo*.py and tests/test_babysit.py. Named test_demo* to
stay among the demo's files; pytest collects nothing from it."""

from __future__ import annotations

import inspect

import pytest

import tpucared.runtime.daemon
import tpucared.runtime.reconciler


def daemon_runs_workloads() -> bool:
    """Whether the daemon launches workloads yet: its tick probes the workers and plans with
    `core.workload_tick.plan_tick` through `runtime.workload.WorkloadRunner`. Until then the
    demo shows nodes coming back but no training, and babysit never sees its command end."""
    modules = (tpucared.runtime.daemon, tpucared.runtime.reconciler)
    texts = [inspect.getsource(m) for m in modules]
    texts.append(" ".join(tpucared.runtime.reconciler.Reconciler.tick.__code__.co_names))
    return any("WorkloadRunner" in t or "plan_tick" in t for t in texts)


needs_workloads = pytest.mark.skipif(
    not daemon_runs_workloads(),
    reason="the daemon does not run workloads yet: WorkloadRunner/plan_tick are not wired "
    "into tpucared.runtime.daemon / reconciler",
)
