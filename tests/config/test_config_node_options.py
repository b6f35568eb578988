"""A fleet's node options in the config: what loads, and one line per mistake."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import textwrap
from pathlib import Path

import pytest
from config_support import MINIMAL

from tpucared.config import ConfigError, load_config
from tpucared.core.model.specs import DataDisk, DiskMode, FleetSpec, NodeOptions

DISK = "projects/my-project/zones/us-central2-b/disks/shards"


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "fleet.toml"
    # MINIMAL ends in its fleet: the extra lines are the fleet's
    path.write_text(MINIMAL + textwrap.dedent(extra), encoding="utf-8")
    return path


def _problems(tmp_path: Path, extra: str) -> list[str]:
    path = _write(tmp_path, extra)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.removeprefix(f"{path}: ") for line in str(info.value).splitlines()]


def test_no_options_keeps_the_spec_hash_of_before(tmp_path: Path) -> None:
    (spec,) = load_config(_write(tmp_path, "")).fleets
    assert spec.node == NodeOptions()
    # The hash as it was computed before node options (and fleet projects, multislice, and
    # the fleet's cloud api) existed: a fleet recorded by an older tpucared is not reported
    # as changed after the upgrade.
    newer = ("node", "project", "slices", "multislice_hold", "api")
    before = {k: v for k, v in dataclasses.asdict(spec).items() if k not in newer}
    before.update(before.pop("extra"))  # the runtime version, where it was before issue 40
    assert "runtime_version" in before
    blob = json.dumps(before, sort_keys=True, default=str).encode()
    assert spec.spec_hash() == hashlib.sha256(blob).hexdigest()[:16]
    edited = FleetSpec(**{**spec.__dict__, "node": NodeOptions(tags=("tpu",))})
    assert edited.spec_hash() != spec.spec_hash()


def test_every_option_loads(tmp_path: Path) -> None:
    (spec,) = load_config(
        _write(
            tmp_path,
            f"""
            network = "projects/my-project/global/networks/research"
            subnetwork = "tpus"
            service_account = "trainer@my-project.iam.gserviceaccount.com"
            service_account_scopes = ["https://www.googleapis.com/auth/devstorage.read_only"]
            tags = ["tpu", "no-ingress"]
            metadata = {{ startup-script = "echo hi" }}
            data_disks = [{{ source = "{DISK}", mode = "read-only" }}, {{ source = "{DISK}-2" }}]
            """,
        )
    ).fleets
    assert spec.node == NodeOptions(
        network="projects/my-project/global/networks/research",
        subnetwork="tpus",
        service_account="trainer@my-project.iam.gserviceaccount.com",
        service_account_scopes=("https://www.googleapis.com/auth/devstorage.read_only",),
        tags=("tpu", "no-ingress"),
        metadata={"startup-script": "echo hi"},
        data_disks=(DataDisk(DISK, DiskMode.READ_ONLY), DataDisk(f"{DISK}-2")),
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('network = "projects/x/networks/n"', 'fleet "sweep": network: expected a network like'),
        ('subnetwork = "Tpus"', 'fleet "sweep": subnetwork: expected a subnetwork like'),
        ('service_account = "trainer"', 'fleet "sweep": service_account: expected a service'),
        ('service_account_scopes = ["cloud-platform"]', 'fleet "sweep": service_account_scopes'),
        (
            'service_account_scopes = ["https://www.googleapis.com/auth/cloud-platform"]',
            'fleet "sweep": service_account_scopes: needs service_account',
        ),
        ('tags = ["No_Caps"]', 'fleet "sweep": tags[0]: expected a network tag'),
        ('tags = ["a", "a"]', 'fleet "sweep": tags: a tag is listed more than once'),
        (
            'metadata = { ssh-keys = "me:ssh-rsa AAAA" }',
            'fleet "sweep": metadata.ssh-keys: reserved',
        ),
        (
            'metadata = { enable-oslogin = "TRUE" }',
            'fleet "sweep": metadata.enable-oslogin: reserved',
        ),
        ('metadata = { "a b" = "x" }', 'fleet "sweep": metadata'),
        ('data_disks = [{ source = "disks/d" }]', 'fleet "sweep": data_disks[0].source: expected'),
        (
            f'data_disks = [{{ source = "{DISK}", mode = "rw" }}]',
            'fleet "sweep": data_disks[0].mode',
        ),
        (
            'data_disks = [{ source = "projects/my-project/zones/europe-west4-a/disks/d" }]',
            'fleet "sweep": data_disks[0].source: a disk attaches only in its own zone',
        ),
        (
            f'data_disks = [{{ source = "{DISK}" }}, {{ source = "{DISK}" }}]',
            'fleet "sweep": data_disks: a disk is listed more than once',
        ),
        (
            'reservation = "projects/my-project/locations/us-central2-b/reservations/r"',
            'fleet "sweep": reservation: a reservation by name needs capacity = "reserved"',
        ),
        ('reservation = "r"', 'fleet "sweep": reservation: expected a reservation like'),
    ],
)
def test_bad_options(tmp_path: Path, extra: str, expected: str) -> None:
    found = _problems(tmp_path, extra + "\n")
    assert any(line.startswith(expected) for line in found), (expected, found)


def test_a_reservation_in_another_zone(tmp_path: Path) -> None:
    found = _problems(
        tmp_path,
        """
        capacity = "reserved"
        provisioning = "queued"
        reservation = "projects/my-project/locations/us-central2-a/reservations/r"
        """,
    )
    assert found == [
        'fleet "sweep": reservation: the reservation is in us-central2-a: the fleet\'s zones '
        "must be that zone only, got ['us-central2-b']"
    ]


def test_os_login_loads_with_or_without_an_account(tmp_path: Path) -> None:
    ssh = load_config(_write(tmp_path, "[ssh]\nos_login = true\n")).ssh
    assert (ssh.os_login, ssh.os_login_account) == (True, None)
    account = "tpucared@my-project.iam.gserviceaccount.com"
    ssh = load_config(
        _write(tmp_path, f'[ssh]\nos_login = true\nos_login_account = "{account}"\n')
    ).ssh
    assert ssh.os_login_account == account
    assert load_config(_write(tmp_path, "")).ssh.os_login is False


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            '[ssh]\nos_login = true\nuser = "me"\n',
            "ssh.user: OS Login names the user (its login profile's): remove ssh.user",
        ),
        (
            '[ssh]\nos_login_account = "a@b.iam.gserviceaccount.com"\n',
            "ssh.os_login_account: needs ssh.os_login = true",
        ),
        ('[ssh]\nos_login = true\nos_login_account = "not-an-email"\n', "ssh.os_login_account"),
        ('[ssh]\nos_login = "yes"\n', "ssh.os_login"),
    ],
)
def test_bad_os_login(tmp_path: Path, extra: str, expected: str) -> None:
    (line,) = _problems(tmp_path, extra)
    assert line.startswith(expected), line


def test_a_fleet_in_another_project(tmp_path: Path) -> None:
    (other,) = load_config(_write(tmp_path, 'project = "other-proj"\n')).fleets
    assert other.project == "other-proj"
    (own,) = load_config(_write(tmp_path, 'project = "my-project"\n')).fleets
    (unnamed,) = load_config(_write(tmp_path, "")).fleets
    # Naming the daemon's own project is not naming another: same spec, same hash.
    assert own == unnamed
    assert own.spec_hash() == unnamed.spec_hash() != other.spec_hash()


def test_the_guard_allows_a_list_of_projects(tmp_path: Path) -> None:
    config = load_config(
        _write(
            tmp_path, 'project = "other-proj"\n[guard]\nproject = ["my-project", "other-proj"]\n'
        )
    )
    assert config.guard is not None
    assert config.guard.projects == frozenset({"my-project", "other-proj"})
    one = load_config(_write(tmp_path, '[guard]\nproject = "my-project"\n')).guard
    assert one is not None
    assert one.projects == frozenset({"my-project"})


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            'project = "third-proj"\n[guard]\nproject = ["my-project", "other-proj"]\n',
            'fleet "sweep": project: "third-proj" is not allowed by the guard '
            "(allowed: my-project, other-proj)",
        ),
        ("[guard]\nproject = []\n", "guard.project"),
        ('[guard]\nproject = ["my-project", "my-project"]\n', "guard.project"),
        ('project = "Not_A_Project"\n', 'fleet "sweep": project'),
    ],
)
def test_bad_projects(tmp_path: Path, extra: str, expected: str) -> None:
    (line,) = _problems(tmp_path, extra)
    assert line.startswith(expected), line
