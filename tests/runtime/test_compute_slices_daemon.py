"""Compute Engine multi-host slices kept alive by the real daemon process against the emulator
(issue 28): each slot a managed instance group of 4 TPU7x VMs joined by a workload policy,
every VM a simulated SSH worker host.

- "iron": 2 slots of spot `tpu7x-standard-4t` slices, topology 2x2x4 (4 hosts). The emulator
  numbers each MIG's workers in an order unlike their names (`compute_mig_worker_order =
  "shuffled"`), so the workload checks that `TPUCARED_WORKER` is the TPU's own worker id (the
  VM's `agent-worker-number`, read from its metadata server). One VM of slot 0 is preempted:
  the whole slice is deleted and made again (a new MIG), the job relaunched on all 4 VMs with
  attempt 2, one preemption counted; slot 1 is untouched. `down` then leaves no MIG, no
  instance template and no workload policy.
- "multi": a multislice slot of 2 slices (2 MIGs of 2 VMs each, topology 2x2x2): the job runs
  on all 4 VMs with the MEGASCALE variables; one VM of slice 1 preempted -> slice 1's MIG
  replaced, slice 0's kept, the job relaunched on all 4.
- "flex": a flex-start VM and a flex-start 2-VM slice (each a BULK MIG: issue 39), that
  waits for capacity, runs, reaches its run duration (the emulator shortens the run:
  `compute_flex_run_seconds`) and asks again: the end is counted as neither a preemption nor
  a failure.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_support import SLOW, Control, Daemon, hosts_emulator_options, query, tpucared, wait_for

from bench import daemon_config
from bench.daemon_config import PROJECT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ZONE = "us-central1-c"
REGION = "us-central1"
MACHINE = "tpu7x-standard-4t"
# Each worker records: attempt, TPUCARED_WORKER, the VM's own TPU worker id, its node.
WORKER_PY = """
import os, urllib.request
url = "http://%s/computeMetadata/v1/instance/attributes/agent-worker-number"
request = urllib.request.Request(
    url % os.environ["GCE_METADATA_HOST"], headers={"Metadata-Flavor": "Google"}
)
tpu_worker = urllib.request.urlopen(request, timeout=5).read().decode()
line = " ".join(
    [os.environ["TPUCARED_ATTEMPT"], os.environ["TPUCARED_WORKER"], tpu_worker,
     os.environ["TPUCARED_NODE"], os.environ.get("MEGASCALE_SLICE_ID", "-"),
     os.environ.get("MEGASCALE_NUM_SLICES", "-")]
)
with open(os.path.join(os.environ["RESULTS"], os.environ["TPUCARED_FLEET"] + "-"
          + os.environ["TPUCARED_SLOT"]), "a") as out:
    out.write(line + "\\n")
"""
RUN = 'python3 "$WORKER_PY"; sleep 600'
FLEX_RUN_S = 4.0  # how long the emulator lets a flex-start VM run (its config asks 10m)


@pytest.fixture
def emulator_options(emulator_options: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return hosts_emulator_options(
        emulator_options,
        tmp_path,
        compute_stopping_seconds=0.3,
        compute_mig_worker_order="shuffled",
        compute_flex_run_seconds=FLEX_RUN_S,
    )


def _workload(tmp_path: Path, results: Path) -> dict[str, Any]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER_PY)
    env = {"RESULTS": str(results), "WORKER_PY": str(script)}
    return {"run": RUN, "env": env, "stop_grace": "1s"}


def _config(tmp_path: Path, control: Control, *fleets: dict[str, Any]) -> Path:
    config = daemon_config.against_emulator(
        control.emulator.url,
        *fleets,
        poll="200ms",
        ssh={"port": control.emulator.options.ssh_port},
        policy={"vanish_grace": "1s", "create_grace": "10s"},
    )
    return daemon_config.write(tmp_path / "fleet.toml", config)


def _compute_fleet(name: str, **keys: Any) -> dict[str, Any]:
    return daemon_config.fleet(
        name,
        api="compute",
        zones=[ZONE],
        machine_type=MACHINE,
        accelerator_type=None,
        runtime_version=None,
        **keys,
    )


def launches(results: Path, slot: str) -> list[tuple[int, int, int, str]]:
    """(attempt, TPUCARED_WORKER, the VM's TPU worker id, node) per launch on `slot`."""
    return [(a, w, t, node) for a, w, t, node, _, _ in launches_with_slices(results, slot)]


def launches_with_slices(results: Path, slot: str) -> list[tuple[int, int, int, str, str, str]]:
    """Each launch's row with MEGASCALE_SLICE_ID and MEGASCALE_NUM_SLICES ("-": unset)."""
    path = results / slot
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(a), int(w), int(t), node, i, n) for a, w, t, node, i, n in rows]


async def compute(control: Control, path: str) -> dict[str, Any]:
    """GET a Compute Engine v1 resource of the emulator, as the adapter sees it."""
    url = f"{control.emulator.url}/compute/v1/projects/{PROJECT}/{path}"
    async with control.session.get(url) as response:
        body: dict[str, Any] = await response.json()
        return body


async def migs(control: Control) -> dict[str, dict[str, Any]]:
    body = await compute(control, f"zones/{ZONE}/instanceGroupManagers")
    return {m["name"]: m for m in body.get("items", [])}


async def instances(control: Control) -> dict[str, dict[str, Any]]:
    body = await compute(control, f"zones/{ZONE}/instances")
    return {i["name"]: i for i in body.get("items", [])}


async def shared_resources(control: Control) -> tuple[list[str], list[str]]:
    templates = await compute(control, "global/instanceTemplates")
    policies = await compute(control, f"regions/{REGION}/resourcePolicies")
    return (
        [t["name"] for t in templates.get("items", [])],
        [p["name"] for p in policies.get("items", [])],
    )


def _launched_on_all(results: Path, slot: str, attempt: int) -> bool:
    got = [row for row in launches(results, slot) if row[0] == attempt]
    return sorted(row[1] for row in got) == [0, 1, 2, 3]


async def test_a_fleet_of_4_host_spot_slices_kept_alive(
    control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    fleet = _compute_fleet("iron", topology="2x2x4", size=2, workload=_workload(tmp_path, results))
    config = _config(tmp_path, control, fleet)
    db = tmp_path / "state.db"
    daemon = await daemons(config).start()

    async def launched(slot: str, attempt: int) -> bool:
        return _launched_on_all(results, slot, attempt)

    for slot in ("iron-0", "iron-1"):
        await wait_for(lambda s=slot: launched(s, 1), SLOW, f"{slot} launched on 4 workers")
    groups = await migs(control)
    assert sorted(groups) == ["iron-0", "iron-1"]
    for group in groups.values():
        assert group["targetSize"] == 4
        assert group["instanceLifecyclePolicy"]["defaultActionOnFailure"] == "DO_NOTHING"
        assert group["resourcePolicies"]["workloadPolicy"].endswith(
            next(iter((await shared_resources(control))[1]))
        )
    templates, policies = await shared_resources(control)
    assert len(templates) == 1
    assert len(policies) == 1
    policy = await compute(control, f"regions/{REGION}/resourcePolicies/{policies[0]}")
    assert policy["workloadPolicy"]["acceleratorTopology"] == "2x2x4"
    # TPUCARED_WORKER is the TPU's own worker id on every VM, whatever the names' order.
    for slot in ("iron-0", "iron-1"):
        for _attempt, worker, tpu_worker, node in launches(results, slot):
            assert (worker, node) == (tpu_worker, slot)
    members = {n: i for n, i in (await instances(control)).items() if n.startswith("iron-0")}
    assert len(members) == 4
    first_id = groups["iron-0"]["id"]

    victim = sorted(members)[0]
    path = f"/projects/{PROJECT}/zones/{ZONE}/instances/{victim}:preempt"
    await control._call("POST", path, {})
    await wait_for(lambda: launched("iron-0", 2), SLOW, "iron-0 relaunched on all 4 workers")
    again = await migs(control)
    assert again["iron-0"]["id"] != first_id  # the whole slice made again
    assert again["iron-1"]["id"] == groups["iron-1"]["id"]
    assert [row[0] for row in launches(results, "iron-1")] == [1, 1, 1, 1]
    slots = query(db, "SELECT slot, preemptions, failures FROM slots ORDER BY slot")
    assert [(r["slot"], r["preemptions"], r["failures"]) for r in slots] == [(0, 1, 0), (1, 0, 0)]
    for _attempt, worker, tpu_worker, _node in launches(results, "iron-0"):
        assert worker == tpu_worker

    code, out, err = await tpucared("status", "-c", str(config), "--json")
    assert code == 0, err
    slot0 = json.loads(out)["fleets"][0]["slots"][0]
    assert (slot0["node"]["phase"], slot0["attempts"]) == ("ready", 2)
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0

    code, out, err = await tpucared("down", "-c", str(config), "--yes")
    assert code == 0, err
    await wait_for(lambda: _none_left(control), SLOW, "no MIG, instance, template or policy")


async def _none_left(control: Control) -> bool:
    return (await migs(control), await instances(control), await shared_resources(control)) == (
        {},
        {},
        ([], []),
    )


async def test_a_multislice_slot_of_two_compute_slices(
    control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    fleet = _compute_fleet(
        "multi", topology="2x2x2", slices=2, workload=_workload(tmp_path, results)
    )
    config = _config(tmp_path, control, fleet)
    db = tmp_path / "state.db"
    daemon = await daemons(config).start()

    def on_all(attempt: int) -> bool:
        rows = [r for r in launches_with_slices(results, "multi-0") if r[0] == attempt]
        return sorted((r[3], r[1]) for r in rows) == [
            ("multi-0-0", 0),
            ("multi-0-0", 1),
            ("multi-0-1", 0),
            ("multi-0-1", 1),
        ]

    async def launched(attempt: int) -> bool:
        return on_all(attempt)

    await wait_for(lambda: launched(1), SLOW, "attempt 1 on the 4 VMs of the 2 slices")
    for _a, worker, tpu_worker, node, slice_id, count in launches_with_slices(results, "multi-0"):
        assert (worker, slice_id, count) == (tpu_worker, node.rsplit("-", 1)[1], "2")
    groups = await migs(control)
    assert sorted(groups) == ["multi-0-0", "multi-0-1"]
    assert all(g["targetSize"] == 2 for g in groups.values())

    member = sorted(n for n in await instances(control) if n.startswith("multi-0-1-"))[0]
    await control._call("POST", f"/projects/{PROJECT}/zones/{ZONE}/instances/{member}:preempt", {})
    await wait_for(lambda: launched(2), SLOW, "attempt 2 on the 4 VMs of the 2 slices")
    again = await migs(control)
    assert again["multi-0-0"]["id"] == groups["multi-0-0"]["id"]  # slice 0 kept
    assert again["multi-0-1"]["id"] != groups["multi-0-1"]["id"]  # slice 1 made again
    slots = query(db, "SELECT preemptions, failures FROM slots WHERE fleet = 'multi'")
    assert [(r["preemptions"], r["failures"]) for r in slots] == [(1, 0)]
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0


@pytest.mark.parametrize("topology", [None, "2x2x2"], ids=["vm", "slice"])
async def test_a_flex_start_fleet_waits_runs_reaches_its_end_and_asks_again(
    control: Control, daemons: Callable[[Path], Daemon], tmp_path: Path, topology: str | None
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    fleet = _compute_fleet(
        "flex",
        capacity="flex-start",
        max_run_duration="10m",
        workload=_workload(tmp_path, results),
        **({} if topology is None else {"topology": topology}),
    )
    # The node as the cloud shows it: a MIG of one VM or of the slice's (issue 39: TPU
    # flex-start on Compute Engine goes through bulk MIGs), its first VM's status.
    node_vm = "flex-0-w-001"
    hosts = 1 if topology is None else 2
    config = _config(tmp_path, control, fleet)
    db = tmp_path / "state.db"
    capacity = {"zone": ZONE, "machine_type": MACHINE, "available": 0}
    await control._call("PUT", "/capacity", capacity)
    daemon = await daemons(config).start()

    async def pending() -> bool:
        # A bulk MIG makes no VM until it can make them all.
        return "flex-0" in await migs(control) and node_vm not in await instances(control)

    await wait_for(pending, SLOW, "flex-0 waiting for capacity")
    await asyncio.sleep(0.5)  # a few ticks: waiting is what it was asked to do
    code, out, err = await tpucared("status", "-c", str(config))
    assert code == 0, err
    assert "waiting for flex-start capacity since" in out, out
    assert await pending()

    await control._call("PUT", "/capacity", {**capacity, "available": None})
    await wait_for(lambda: _launched(results, "flex-0", 1, hosts), SLOW, "attempt 1 running")
    first = (await instances(control))[node_vm]["id"]
    code, out, err = await tpucared("status", "-c", str(config), "--json")
    assert code == 0, err
    node = json.loads(out)["fleets"][0]["slots"][0]["node"]
    assert node["run_ends_at"] is not None

    # The cloud ends the run (deletes the VM) at its duration: the slot asks again at once,
    # and the job goes on with attempt 2; neither a preemption nor a failure.
    await wait_for(lambda: _launched(results, "flex-0", 2, hosts), SLOW, "attempt 2 running")
    assert (await instances(control))[node_vm]["id"] != first
    slots = query(db, "SELECT preemptions, failures FROM slots WHERE fleet = 'flex'")
    assert [(r["preemptions"], r["failures"]) for r in slots] == [(0, 0)]
    ended = query(db, "SELECT end_reason FROM nodes WHERE fleet = 'flex' AND ready_at IS NOT NULL")
    assert ended
    assert ended[0]["end_reason"] == "run ended"
    events = query(db, "SELECT node FROM events WHERE kind = 'node.run_ended'")
    assert [e["node"] for e in events] == ["flex-0"]
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait(SLOW) == 0


async def _launched(results: Path, slot: str, attempt: int, workers: int = 1) -> bool:
    return len([row for row in launches(results, slot) if row[0] == attempt]) >= workers
