"""Who may log in to a simulated worker: the node's `ssh-keys` metadata, read like the guest agent.

On a real TPU VM the guest agent watches the instance metadata, creates each user named in
`ssh-keys` (and the deprecated `sshKeys`) and installs that user's keys; a metadata patch takes
effect a few seconds later. The simulated hosts call `is_authorized()` on every authentication
attempt against the node's current metadata, so a patch takes effect at once.

Entry format, one per line: `user:ssh-ed25519 AAAA... comment`. Lines that do not parse are
ignored, as the guest agent ignores them.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping

import asyncssh

# Metadata keys the guest agent reads user keys from (`sshKeys` is the deprecated spelling).
SSH_KEYS_METADATA = ("ssh-keys", "sshKeys")


def authorized_keys(metadata: Mapping[str, object]) -> dict[str, set[bytes]]:
    """User name -> the public key blobs (SSH wire format) it may log in with."""
    users: dict[str, set[bytes]] = {}
    for name in SSH_KEYS_METADATA:
        value = metadata.get(name)
        if not isinstance(value, str):
            continue
        for line in value.splitlines():
            user, sep, rest = line.strip().partition(":")
            fields = rest.split()
            if not sep or not user or len(fields) < 2:
                continue
            try:
                blob = binascii.a2b_base64(fields[1])
            except binascii.Error:
                continue
            users.setdefault(user, set()).add(blob)
    return users


def is_authorized(metadata: Mapping[str, object], username: str, key: asyncssh.SSHKey) -> bool:
    """Whether `key` is listed for `username` in the node metadata."""
    # The blob embeds the key type, so comparing blobs also compares types.
    return key.public_data in authorized_keys(metadata).get(username, set())
