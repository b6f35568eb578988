"""Fleets in several projects, as pure planner rules: what a list shows counts only in its own
(project, zone); creates, deletes and adoptions carry the project of the fleet or record."""

from __future__ import annotations

from dataclasses import replace

from tpucared.core.vocab.actions import Adopt, CreateNode, DeleteNode, RecordCloud

from ..core_support import FLEET, Z1, inc, listed, node, run, seen, snapshot, spec

GRANT = "second-grant"


def _in(project: str, obs: list) -> list:  # type: ignore[type-arg]
    return [replace(o, project=project) for o in obs]


def test_a_create_goes_to_the_fleets_project() -> None:
    s = spec(size=1, zones=(Z1,), project=GRANT)
    p = run([s], _in(GRANT, [listed(Z1)]))
    (create,) = p.of(CreateNode)
    assert (create.project, create.zone) == (GRANT, Z1)


def test_another_projects_list_of_the_same_zone_is_not_this_fleets() -> None:
    """Only our own project's Z1 was listed: the fleet in GRANT must not create blind."""
    s = spec(size=1, zones=(Z1,), project=GRANT)
    p = run([s], [listed(Z1)])
    assert p.of(CreateNode) == ()


def test_a_node_listed_in_another_project_is_not_the_incarnations() -> None:
    """The incarnation lives in GRANT; the same name READY in our project's Z1 is not it:
    GRANT's list shows it absent (the first step to vanished)."""
    s = spec(size=1, zones=(Z1,), project=GRANT)
    n = node()
    record = seen(inc(project=GRANT), n)
    p = run([s], [listed(Z1, n), *_in(GRANT, [listed(Z1)])], snapshot(record, specs=[s]))
    assert [a.cloud.cloud_state for a in p.of(RecordCloud)] == ["ABSENT"]
    # ... and listed in GRANT, it is there: nothing to record, nothing to do.
    p = run([s], [listed(Z1), *_in(GRANT, [listed(Z1, n)])], snapshot(record, specs=[s]))
    assert p.actions == ()


def test_a_delete_goes_to_the_records_project_whatever_the_config_says() -> None:
    """Scaled to 0 after the fleet moved to our project: the node is deleted in GRANT,
    where the record says it is."""
    s = spec(size=0, zones=(Z1,))
    n = node()
    record = seen(inc(project=GRANT), n)
    p = run([s], [listed(Z1), *_in(GRANT, [listed(Z1, n)])], snapshot(record, specs=[s]))
    (delete,) = p.of(DeleteNode)
    assert (delete.project, delete.node_name) == (GRANT, f"{FLEET}-0")


def test_a_stray_of_ours_is_adopted_in_the_project_it_was_found_in() -> None:
    s = spec(size=1, zones=(Z1,), project=GRANT)
    p = run([s], [listed(Z1), *_in(GRANT, [listed(Z1, node())])])
    (adopt,) = p.of(Adopt)
    assert (adopt.project, adopt.zone, adopt.node_name) == (GRANT, Z1, f"{FLEET}-0")
