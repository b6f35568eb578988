"""The daemon's client key (generation, permissions) and the node ssh-keys metadata format."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import asyncssh
import pytest

from tpucared.ssh import (
    KeyFileError,
    add_ssh_keys_entry,
    ensure_client_key,
    openssh_public_key,
    ssh_keys_metadata_entry,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generates_ed25519_key_0600_in_new_0700_dir_and_reloads_it(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ssh" / "id_ed25519"
    old_umask = os.umask(0o022)  # a typical umask must not leak into the key's mode
    try:
        key = ensure_client_key(path)
    finally:
        os.umask(old_umask)
    assert key.algorithm == b"ssh-ed25519"
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert path.with_name("id_ed25519.pub").read_text().startswith("ssh-ed25519 AAAA")
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    again = ensure_client_key(path)
    assert openssh_public_key(again) == openssh_public_key(key)
    assert asyncssh.read_private_key(path).public_data == key.public_data


def test_existing_parent_directory_mode_is_left_alone(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    ensure_client_key(tmp_path / "id_ed25519")
    assert mode(tmp_path) == 0o755


@pytest.mark.parametrize("bad_mode", [0o644, 0o640, 0o604, 0o660])
def test_refuses_key_accessible_by_group_or_others(tmp_path: Path, bad_mode: int) -> None:
    path = tmp_path / "id_ed25519"
    ensure_client_key(path)
    path.chmod(bad_mode)
    with pytest.raises(KeyFileError, match=f"mode {bad_mode:04o}.*chmod 600"):
        ensure_client_key(path)


def test_refuses_unreadable_or_encrypted_key(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key")
    garbage.chmod(0o600)
    with pytest.raises(KeyFileError, match="cannot load SSH key"):
        ensure_client_key(garbage)
    encrypted = tmp_path / "encrypted"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(
        encrypted, "pkcs8-pem", passphrase="pw"
    )
    encrypted.chmod(0o600)
    with pytest.raises(KeyFileError, match="unencrypted"):
        ensure_client_key(encrypted)


def test_concurrent_first_use_yields_one_key(tmp_path: Path) -> None:
    path = tmp_path / "id_ed25519"
    keys: list[asyncssh.SSHKey] = []
    threads = [
        threading.Thread(target=lambda: keys.append(ensure_client_key(path))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({openssh_public_key(k) for k in keys}) == 1
    assert openssh_public_key(keys[0]) == openssh_public_key(asyncssh.read_private_key(path))


def test_metadata_entry_format() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519", comment="ignored@host")
    entry = ssh_keys_metadata_entry("tpucared", key)
    user, _, rest = entry.partition(":")
    algorithm, blob, comment = rest.split(" ")
    assert (user, algorithm, comment) == ("tpucared", "ssh-ed25519", "tpucared")
    assert asyncssh.import_public_key(f"{algorithm} {blob}").public_data == key.public_data


@pytest.mark.parametrize("user", ["", "a:b", "two words", "x" * 40, "-dash"])
def test_metadata_entry_rejects_bad_user(user: str) -> None:
    with pytest.raises(ValueError, match="invalid SSH user"):
        ssh_keys_metadata_entry(user, asyncssh.generate_private_key("ssh-ed25519"))


def test_add_ssh_keys_entry_keeps_others_and_is_idempotent() -> None:
    ours = ssh_keys_metadata_entry("tpucared", asyncssh.generate_private_key("ssh-ed25519"))
    alice = "alice:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAlice alice"
    merged = add_ssh_keys_entry(f"{alice}\n", ours)
    assert merged.splitlines() == [alice, ours]
    assert add_ssh_keys_entry(merged, ours) == merged
    assert add_ssh_keys_entry(None, ours) == ours
