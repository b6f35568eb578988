"""Host key pins: from guest attributes, formatting, fingerprints, what asyncssh is told."""

from __future__ import annotations

import asyncssh
import pytest

from tpucared.ssh import (
    HostKeyMismatch,
    HostKeyPolicy,
    fingerprint,
    format_host_key,
    host_keys_from_guest_attributes,
)


def test_guest_attributes_bare_blob_or_full_line_ed25519_first() -> None:
    ed = asyncssh.generate_private_key("ssh-ed25519")
    ec = asyncssh.generate_private_key("ecdsa-sha2-nistp256")
    ed_line, ec_line = format_host_key(ed), format_host_key(ec)
    # The guest agent writes the base64 blob only (with the newline of the .pub file).
    pins = host_keys_from_guest_attributes(
        [
            ("ecdsa-sha2-nistp256", ec_line + " root@t1v-n-0\n"),
            ("ssh-ed25519", ed_line.split()[1] + "\n"),
        ]
    )
    assert pins == (ed_line, ec_line)
    assert host_keys_from_guest_attributes({"ssh-ed25519": ""}) == ()


def test_guest_attributes_garbage_is_an_error() -> None:
    with pytest.raises(ValueError, match="not an OpenSSH public key"):
        host_keys_from_guest_attributes({"ssh-ed25519": "bm90IGEga2V5"})


def test_fingerprint_matches_openssh_format() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    assert fingerprint(format_host_key(key)) == key.get_fingerprint("sha256")
    assert fingerprint(format_host_key(key)).startswith("SHA256:")


def test_policy_pins_keys_or_trusts_on_first_use_preferring_ed25519() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    pinned = HostKeyPolicy((format_host_key(key),)).connect_kwargs()
    known = pinned["known_hosts"]
    assert isinstance(known, tuple)
    trusted, cas, revoked = known
    assert [k.public_data for k in trusted] == [key.public_data]
    assert not cas
    assert not revoked
    tofu = HostKeyPolicy().connect_kwargs()
    assert tofu["known_hosts"] is None
    assert tofu["server_host_key_algs"][0] == "ssh-ed25519"  # type: ignore[index]


def test_mismatch_message_names_both_fingerprints() -> None:
    pinned = format_host_key(asyncssh.generate_private_key("ssh-ed25519"))
    seen = format_host_key(asyncssh.generate_private_key("ssh-ed25519"))
    err = HostKeyMismatch("10.0.0.2", 22, [pinned], seen)
    assert fingerprint(pinned) in str(err)
    assert fingerprint(seen) in str(err)
    assert "10.0.0.2:22" in str(err)
    assert "incarnation" in str(err)
