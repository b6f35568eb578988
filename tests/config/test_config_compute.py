"""`api = "compute"` fleets (issue 27): Compute Engine TPU VMs named by machine_type, image and
on_preemption, beside TPU API fleets; what loads, and each mistake as one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from config_support import MINIMAL, load, problems

from tpucared.config import load_config
from tpucared.core.model.machines import MACHINE_TYPES, chips_of
from tpucared.core.model.specs import CapacityKind, FleetSpec, NodeOptions

IRON = """
[[fleet]]
name = "iron"
api = "compute"
zones = ["us-central1-c", "us-east5-b"]
machine_type = "tpu7x-standard-4t"
size = 2
"""


def compute(extra: str = "", drop: str | None = None) -> str:
    text = IRON + extra + "\n"
    return MINIMAL + (text.replace(drop, "") if drop else text)


def iron(tmp_path: Path, text: str) -> FleetSpec:
    return load(tmp_path, text).fleet("iron")


def test_a_compute_fleet_beside_a_tpu_fleet(tmp_path: Path) -> None:
    config = load(tmp_path, compute())
    sweep, spec = config.fleet("sweep"), config.fleet("iron")
    assert (sweep.api, sweep.accelerator_type, sweep.node.on_preemption) == ("tpu", "v4-8", None)
    # The port reads the machine type and the image where a TPU node's type and runtime go;
    # "" is the machine type's generation's default image.
    assert (spec.api, spec.accelerator_type, spec.extra["runtime_version"]) == (
        "compute",
        "tpu7x-standard-4t",
        "",
    )
    assert spec.zones == ("us-central1-c", "us-east5-b")
    assert spec.capacity is CapacityKind.SPOT
    # Google's own TPU spot template stops a preempted VM: it stays listed, TERMINATED.
    assert spec.node.on_preemption == "stop"
    assert spec.spec_hash() != FleetSpec(**{**spec.__dict__, "api": "tpu"}).spec_hash()


def test_a_tpu_fleet_keeps_its_spec_hash(tmp_path: Path) -> None:
    """`api` and `on_preemption` at their defaults leave a TPU API fleet's hash alone."""
    sweep = load(tmp_path, MINIMAL).fleet("sweep")
    plain = FleetSpec(
        name="sweep",
        zones=("us-central2-b",),
        accelerator_type="v4-8",
        extra={"runtime_version": sweep.extra["runtime_version"]},
        size=2,
    )
    assert sweep.node == NodeOptions()
    assert sweep.spec_hash() == plain.spec_hash()


@pytest.mark.parametrize(
    ("extra", "image", "action"),
    [
        ('on_preemption = "delete"', "", "delete"),
        (
            'image = "projects/my-project/global/images/trainer-v3"',
            "projects/my-project/global/images/trainer-v3",
            "stop",
        ),
        ('capacity = "on-demand"', "", None),
    ],
)
def test_image_and_termination_action(
    tmp_path: Path, extra: str, image: str, action: str | None
) -> None:
    spec = iron(tmp_path, compute(extra))
    assert (spec.extra["runtime_version"], spec.node.on_preemption) == (image, action)


def test_every_tpu_api_fleet_key_keeps_its_meaning(tmp_path: Path) -> None:
    spec = iron(
        tmp_path,
        compute(
            'project = "grant-project"\nnetwork = "tpu-net"\nsubnetwork = "tpu-sub"\n'
            'service_account = "trainer@grant-project.iam.gserviceaccount.com"\n'
            'tags = ["ssh"]\nmetadata = { team = "lm" }\nlabels = { team = "lm" }\n'
            "slices = 2\n"
            '[fleet.workload]\nrun = "python train.py"\n',
        ),
    )
    assert spec.project == "grant-project"
    assert (spec.node.network, spec.node.subnetwork, spec.node.tags) == (
        "tpu-net",
        "tpu-sub",
        ("ssh",),
    )
    assert spec.labels == {"team": "lm"}
    assert (spec.slices, spec.nodes) == (2, 4)
    assert spec.workload is not None


def test_a_reservation_by_name(tmp_path: Path) -> None:
    text = compute(
        'capacity = "reserved"\n'
        'reservation = "projects/my-project/zones/us-central1-c/reservations/iron-res"',
    ).replace('["us-central1-c", "us-east5-b"]', '["us-central1-c"]')
    spec = iron(tmp_path, text)
    # What reservationAffinity's values take: the name, in the fleet's own project.
    assert (spec.node.reservation, spec.node.on_preemption) == ("iron-res", None)
    shared = iron(tmp_path, text.replace("projects/my-project/", "projects/other-project/"))
    assert shared.node.reservation == "projects/other-project/reservations/iron-res"


def test_a_calendar_reservation_is_reservation_bound(tmp_path: Path) -> None:
    """Issue 39: a calendar-mode reservation's VMs must be RESERVATION_BOUND; the config says
    which reservation is one. Part of the spec (its hash), None elsewhere (old hashes kept)."""
    text = compute(
        'capacity = "reserved"\n'
        'reservation = "projects/my-project/zones/us-central1-c/reservations/iron-res"',
    ).replace('["us-central1-c", "us-east5-b"]', '["us-central1-c"]')
    plain = iron(tmp_path, text)
    assert plain.node.reservation_bound is None
    bound = iron(tmp_path, text + "reservation_bound = true\n")
    assert bound.node.reservation_bound is True
    assert bound.spec_hash() != plain.spec_hash()
    assert iron(tmp_path, text + "reservation_bound = false\n").spec_hash() == plain.spec_hash()


def test_ai_zones_are_zones(tmp_path: Path) -> None:
    """TPU7x and v6e are offered in AI zones such as us-central1-ai1a (tpu/docs/regions-zones)."""
    spec = iron(tmp_path, compute().replace('"us-east5-b"', '"us-central1-ai1a"'))
    assert spec.zones == ("us-central1-c", "us-central1-ai1a")


def test_the_guard_knows_machine_types(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        compute()
        + '[guard]\naccelerator_types = ["v4-8"]\nmachine_types = ["tpu7x-standard-4t"]\n'
        + "max_nodes = 4\n",
    )
    assert config.guard is not None
    assert config.guard.machine_types == frozenset({"tpu7x-standard-4t"})


def test_a_multi_host_fleet(tmp_path: Path) -> None:
    spec = iron(tmp_path, compute('topology = "2x2x4"\nslices = 2'))
    assert (spec.node.topology, spec.hosts, spec.slices) == ("2x2x4", 4, 2)
    assert spec.node.max_run_duration_s is None
    # The topology is part of the spec: changing it is a recorded spec change.
    assert spec.spec_hash() != iron(tmp_path, compute("slices = 2")).spec_hash()
    one = iron(tmp_path, compute())
    assert (one.node.topology, one.hosts) == (None, 1)


def test_a_flex_start_fleet(tmp_path: Path) -> None:
    spec = iron(tmp_path, compute('capacity = "flex-start"\nmax_run_duration = "7d"'))
    assert spec.capacity is CapacityKind.FLEX_START
    assert spec.flex_start
    assert (spec.node.max_run_duration_s, spec.node.on_preemption) == (7 * 86400, None)
    short = iron(tmp_path, compute('capacity = "flex-start"\nmax_run_duration = "10m"'))
    assert short.node.max_run_duration_s == 600
    assert spec.spec_hash() != short.spec_hash()


def test_new_node_fields_at_none_keep_the_hash() -> None:
    """A fleet with node options from before issue 28 keeps its hash: topology and
    max_run_duration_s at None are left out of it."""
    options = NodeOptions(network="tpu-net", on_preemption="stop")
    spec = FleetSpec(
        "iron", ("us-central1-c",), "tpu7x-standard-4t", 2, {"runtime_version": ""}, node=options
    )
    assert spec.spec_hash() == "7f74ff021038eb22"  # as main computed it before the fields


def test_the_machine_types_table_agrees_with_the_suffix() -> None:
    for name, machine in MACHINE_TYPES.items():
        assert chips_of(name) == machine.chips, name
        assert machine.default_image.startswith(
            "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accel-"
        )
    assert MACHINE_TYPES["tpu7x-standard-4t"].default_image.endswith("-tpu-tpu7x")
    assert chips_of("ct6e-standard-8t") == 8
    assert chips_of("n2-standard-8") is None


BAD = [
    (
        "compute-with-tpu-keys",
        compute('accelerator_type = "v4-8"\nruntime_version = "tpu-ubuntu2204-base"'),
        [
            'fleet "iron": accelerator_type, runtime_version: not for api = "compute" fleets: '
            "they name machine_type"
        ],
    ),
    (
        "tpu-with-compute-keys",
        compute(drop='api = "compute"\n'),
        [
            'fleet "iron": machine_type: only for api = "compute" fleets (Compute Engine); '
            'a "tpu" fleet (the default) names accelerator_type and runtime_version'
        ],
    ),
    (
        "tpu-with-image-and-action",
        MINIMAL + 'image = "projects/p-roject/global/images/x"\non_preemption = "delete"\n',
        ['fleet "sweep": image, on_preemption: only for api = "compute" fleets'],
    ),
    (
        "unknown-machine-type",
        compute().replace("tpu7x-standard-4t", "tpu7x-standard-8t"),
        [
            'fleet "iron": machine_type: expected a TPU machine type (tpu7x-standard-4t, '
            "ct6e-standard-1t, ct6e-standard-4t, ct6e-standard-8t, ct5p-hightpu-4t), "
            'got "tpu7x-standard-8t"'
        ],
    ),
    (
        "no-machine-type",
        compute(drop='machine_type = "tpu7x-standard-4t"\n'),
        ['fleet "iron": machine_type: required for api = "compute": one of tpu7x-standard-4t'],
    ),
    ("unknown-api", compute().replace('"compute"', '"gke"'), ['fleet "iron": api: expected "tpu"']),
    (
        "bad-image",
        compute('image = "ubuntu-accel-2404"'),
        ['fleet "iron": image: expected an image like "projects/P/global/images/family/F"'],
    ),
    (
        "bad-action",
        compute('on_preemption = "suspend"'),
        ['fleet "iron": on_preemption: expected "stop"'],
    ),
    (
        "action-not-spot",
        compute('on_preemption = "stop"\ncapacity = "on-demand"'),
        ['fleet "iron": on_preemption: only for capacity = "spot"'],
    ),
    (
        "queued",
        compute('provisioning = "queued"'),
        ['fleet "iron": provisioning: "queued" is a TPU API feature'],
    ),
    (
        "reserved-without-reservation",
        compute('capacity = "reserved"'),
        ['fleet "iron": reservation: required with capacity = "reserved" on Compute Engine'],
    ),
    (
        "tpu-reservation-form",
        compute(
            'capacity = "reserved"\n'
            'reservation = "projects/my-project/locations/us-central1-c/reservations/r"'
        ),
        ['fleet "iron": reservation: Compute Engine names it "projects/P/zones/Z/reservations/R"'],
    ),
    (
        "guard-machine-type",
        compute() + '[guard]\nmachine_types = ["ct6e-standard-4t"]\n',
        [
            'fleet "iron": machine_type: "tpu7x-standard-4t" is not allowed by the guard '
            "(allowed: ct6e-standard-4t)",
            # Naming machine types restricts TPU API fleets too: none is allowed.
            'fleet "sweep": accelerator_type: "v4-8" is not allowed by the guard '
            "(allowed: nothing)",
        ],
    ),
    (
        "guard-accelerator-types-only",
        compute() + '[guard]\naccelerator_types = ["v4-8"]\n',
        ['fleet "iron": machine_type: "tpu7x-standard-4t" is not allowed by the guard'],
    ),
    (
        "tpu-with-topology",
        MINIMAL + 'topology = "2x2x4"\n',
        ['fleet "sweep": topology: only for api = "compute" fleets (Compute Engine)'],
    ),
    (
        "unknown-topology",
        compute('topology = "2x2x3"'),
        [
            'fleet "iron": topology: "2x2x3" is not a tpu7x-standard-4t topology: one of '
            "2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x8x16, 8x16x16"
        ],
    ),
    (
        "v5p-has-no-2x2x4",
        compute('topology = "2x2x4"').replace("tpu7x-standard-4t", "ct5p-hightpu-4t"),
        ['fleet "iron": topology: "2x2x4" is not a ct5p-hightpu-4t topology: one of 2x2x1, '],
    ),
    (
        "bad-topology-syntax",
        compute('topology = "2-2-4"'),
        ['fleet "iron": topology: expected a topology like "2x2x4"'],
    ),
    (
        "tpu-flex-start",
        MINIMAL + 'capacity = "flex-start"\nmax_run_duration = "7d"\n',
        [
            'fleet "sweep": capacity: "flex-start" only on api = "compute" fleets: the TPU '
            "API's flex-start goes through queued resources, which tpucared does not support"
        ],
    ),
    (
        "flex-start-without-run",
        compute('capacity = "flex-start"'),
        [
            'fleet "iron": max_run_duration: required with capacity = "flex-start": '
            "how long a run lasts, 10m to 7d"
        ],
    ),
    (
        "flex-start-run-too-short",
        compute('capacity = "flex-start"\nmax_run_duration = "5m"'),
        ['fleet "iron": max_run_duration: expected 10m to 7d, got 5m'],
    ),
    (
        "flex-start-run-too-long",
        compute('capacity = "flex-start"\nmax_run_duration = "8d"'),
        ['fleet "iron": max_run_duration: expected 10m to 7d, got 8d'],
    ),
    (
        "run-without-flex-start",
        compute('max_run_duration = "1d"'),
        [
            'fleet "iron": max_run_duration: only with capacity = "flex-start" '
            "(how long a flex-start run lasts)"
        ],
    ),
    (
        "flex-start-with-on-preemption",
        compute('capacity = "flex-start"\nmax_run_duration = "1d"\non_preemption = "stop"'),
        ['fleet "iron": on_preemption: only for capacity = "spot"'],
    ),
    (
        "guard-max-nodes-counts-hosts",
        compute('topology = "2x2x4"') + "[guard]\nmax_nodes = 9\n",
        [
            "guard.max_nodes: the fleets ask for 10 nodes (sweep 2, iron 2x4 hosts), "
            "more than the 9 allowed"
        ],
    ),
    (
        "reservation-bound-without-a-reservation",
        compute("reservation_bound = true"),
        ['fleet "iron": reservation_bound: only with capacity = "reserved"'],
    ),
    (
        "reservation-bound-on-a-tpu-fleet",
        MINIMAL + "reservation_bound = true\n",
        ['fleet "sweep": reservation_bound: only for api = "compute" fleets'],
    ),
    (
        # A MIG's baseInstanceName ({node}-w-###) leaves a node name 50 characters.
        "slice-node-name-over-a-migs-limit",
        compute('topology = "2x2x4"').replace('name = "iron"', f'name = "{"i" * 49}"'),
        [f'fleet "{"i" * 49}": name: a slot of this fleet is a managed instance group'],
    ),
    (
        "flex-node-name-over-a-migs-limit",
        compute('capacity = "flex-start"\nmax_run_duration = "1h"').replace(
            'name = "iron"', f'name = "{"f" * 49}"'
        ),
        [f'fleet "{"f" * 49}": name: a slot of this fleet is a managed instance group'],
    ),
    (
        "slice-over-a-migs-size",
        compute('topology = "16x16x16"').replace("tpu7x-standard-4t", "ct5p-hightpu-4t")
        + "[guard]\nmax_nodes = 10000\n",
        ['fleet "iron": topology: 16x16x16 takes 1024 VMs, more than the 1000'],
    ),
    (
        "multislice-labels-over-google-s-64",
        MINIMAL
        + "slices = 2\n"
        + "labels = {"
        + ", ".join(f'k{i} = "v"' for i in range(61))
        + "}\n",
        ['fleet "sweep": labels: at most 60 with slices > 1'],
    ),
    (
        "guard-max-nodes-counts-both",
        compute() + "[guard]\nmax_nodes = 3\n",
        ["guard.max_nodes: the fleets ask for 4 nodes (sweep 2, iron 2), more than the 3"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_compute_config(tmp_path: Path, text: str, expected: list[str]) -> None:
    found = problems(tmp_path, text)
    for want in expected:
        assert any(line.startswith(want) for line in found), (want, found)
    # One mistake, one line.
    assert len(found) == len(expected), found


def test_the_gce_example_s_issue_28_fleets_load(tmp_path: Path) -> None:
    """deploy/examples/gce.toml's commented multi-host and flex-start fleets, uncommented
    with the guard widened as their comment says, load as they claim."""
    example = Path(__file__).parents[2] / "deploy" / "examples" / "gce.toml"
    head, _, tail = example.read_text().partition("# Issue 28, commented out")
    # Only the commented TOML lines (tables, keys), not the prose around them.
    fleets = "\n".join(
        found.group(1)
        for line in tail.splitlines()
        if (found := re.fullmatch(r"# (\[.*|[a-z_]+ = .*)", line))
    )
    text = (
        head.replace("max_nodes = 12", "max_nodes = 18")
        .replace(
            'capacity = ["spot", "preemptible"]', 'capacity = ["spot", "preemptible", "flex-start"]'
        )
        .replace(
            'machine_types = ["tpu7x-standard-4t"]',
            'machine_types = ["tpu7x-standard-4t", "ct6e-standard-4t"]',
        )
        .replace('"us-east5-b"]', '"us-east5-b", "us-east5-a"]')
        + fleets
    )
    path = tmp_path / "gce.toml"
    path.write_text(text)
    config = load_config(path)
    pod, flex = config.fleet("pod"), config.fleet("flex")
    assert (pod.node.topology, pod.hosts) == ("2x2x2", 2)
    assert (flex.capacity, flex.hosts, flex.node.max_run_duration_s) == (
        CapacityKind.FLEX_START,
        4,
        7 * 86400,
    )
