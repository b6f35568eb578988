"""core/planning/drift.py: which node options a listed node was made otherwise with."""

from __future__ import annotations

from tpucared.core.model.observed import NodeMade
from tpucared.core.model.specs import NodeOptions
from tpucared.core.planning.drift import differences

MADE = NodeMade(
    network="projects/p/global/networks/research",
    subnetwork="projects/p/regions/r/subnetworks/tpus",
    service_account="trainer@p.iam.gserviceaccount.com",
    tags=("tpu", "no-ingress"),
)


def test_nothing_asked_nothing_differs() -> None:
    assert differences(NodeOptions(), MADE) == []
    assert differences(NodeOptions(), NodeMade()) == []


def test_a_short_name_matches_its_full_path() -> None:
    asked = NodeOptions(network="research", subnetwork="projects/p/regions/r/subnetworks/tpus")
    assert differences(asked, MADE) == []


def test_tags_are_a_set() -> None:
    assert differences(NodeOptions(tags=("no-ingress", "tpu")), MADE) == []


def test_each_difference_is_named() -> None:
    asked = NodeOptions(
        network="other",
        subnetwork="tpus",
        service_account="evaluator@p.iam.gserviceaccount.com",
        tags=("tpu",),
    )
    assert differences(asked, MADE) == [
        "network research (asks other)",
        "service account trainer@p.iam.gserviceaccount.com "
        "(asks evaluator@p.iam.gserviceaccount.com)",
        "tags ['no-ingress', 'tpu'] (asks ['tpu'])",
    ]


def test_the_default_service_account_differs_from_an_asked_one() -> None:
    asked = NodeOptions(service_account="trainer@p.iam.gserviceaccount.com")
    assert differences(asked, NodeMade()) == [
        "service account default (asks trainer@p.iam.gserviceaccount.com)"
    ]


def test_an_unlisted_network_is_not_evidence() -> None:
    assert differences(NodeOptions(network="research"), NodeMade(network=None)) == []
