"""Pure pieces of the fan-out: error classification, the retry policy, building targets."""

from __future__ import annotations

import random
import socket

import asyncssh
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpucared.core.model.observed import WorkerEndpoint
from tpucared.ssh import (
    NEW_NODE_RETRY,
    NO_RETRY,
    TRANSIENT_KINDS,
    HostKeyMismatch,
    RetryPolicy,
    SshErrorKind,
    Target,
    classify,
    format_host_key,
    targets_for_node,
)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ConnectionRefusedError(111, "refused"), SshErrorKind.REFUSED),
        (TimeoutError(), SshErrorKind.TIMEOUT),
        (OSError(113, "No route to host"), SshErrorKind.UNREACHABLE),
        (socket.gaierror(-2, "Name or service not known"), SshErrorKind.UNREACHABLE),
        (ConnectionResetError(104, "reset"), SshErrorKind.CLOSED),
        (asyncssh.ConnectionLost("Connection lost"), SshErrorKind.CLOSED),
        (asyncssh.DisconnectError(11, "Too many connections"), SshErrorKind.CLOSED),
        (asyncssh.PermissionDenied("Permission denied"), SshErrorKind.AUTH),
        (asyncssh.ChannelOpenError(4, "no more sessions"), SshErrorKind.CHANNEL),
        (asyncssh.KeyExchangeFailed("No matching kex"), SshErrorKind.PROTOCOL),
        (asyncssh.ProtocolError("bad packet"), SshErrorKind.PROTOCOL),
        (asyncssh.HostKeyNotVerifiable("not trusted"), SshErrorKind.HOST_KEY_MISMATCH),
        (HostKeyMismatch("h", 22, [], None), SshErrorKind.HOST_KEY_MISMATCH),
    ],
)
def test_classify(exc: BaseException, kind: SshErrorKind) -> None:
    assert classify(exc) is kind


def test_classify_refuses_programming_errors() -> None:
    with pytest.raises(TypeError, match="not an SSH or network error"):
        classify(KeyError("bug"))


@given(st.integers(1, 30), st.integers(0, 2**32))
def test_delays_grow_are_capped_and_jittered_within_bounds(attempt: int, seed: int) -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=10.0, jitter=0.2)
    base = min(10.0, 2.0 ** (attempt - 1))
    assert 0.8 * base <= policy.delay(attempt, random.Random(seed)) <= 1.2 * base


def test_should_retry_only_transient_kinds_before_the_command_and_within_attempts() -> None:
    policy = RetryPolicy(attempts=3)
    for kind in SshErrorKind:
        assert policy.should_retry(kind, 1) is (kind in TRANSIENT_KINDS)
        assert not policy.should_retry(kind, 3)
    for started in (SshErrorKind.COMMAND_TIMEOUT, SshErrorKind.LOST):
        assert not started.before_command
        assert not RetryPolicy(retry_on=frozenset(SshErrorKind)).should_retry(started, 1)
    assert not NO_RETRY.should_retry(SshErrorKind.REFUSED, 1)
    # The new-node policy covers the first minutes of a node's life.
    assert sum(NEW_NODE_RETRY.delay(i, random.Random(0)) for i in range(1, 16)) > 120


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"initial_delay": -1}, {"multiplier": 0.5}, {"jitter": 1.0}],
)
def test_retry_policy_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_targets_for_node_uses_external_ips_by_default_and_pins_per_worker() -> None:
    pin = format_host_key(asyncssh.generate_private_key("ssh-ed25519"))
    endpoints = [
        WorkerEndpoint(1, "10.0.0.3", "34.1.1.2"),
        WorkerEndpoint(0, "10.0.0.2", "34.1.1.1"),
    ]
    targets = targets_for_node(
        endpoints, user="tpucared", pinned_host_keys={1: [pin]}, incarnation="123"
    )
    assert targets == [
        Target(0, "34.1.1.1", 22, "tpucared", (), "123"),
        Target(1, "34.1.1.2", 22, "tpucared", (pin,), "123"),
    ]
    internal = targets_for_node(endpoints, user="u", port=2222, internal_ip=True)
    assert [(t.host, t.port) for t in internal] == [("10.0.0.2", 2222), ("10.0.0.3", 2222)]
    with pytest.raises(ValueError, match=r"worker 0 has no external IP.*internal_ip"):
        targets_for_node([WorkerEndpoint(0, "10.0.0.2")], user="u")


def test_target_rejects_a_corrupt_pin() -> None:
    with pytest.raises(ValueError, match="not an OpenSSH public key"):
        Target(0, "h", pinned_host_keys=("ssh-ed25519 garbage",))
