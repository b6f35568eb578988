"""The daemon's own SSH client key and the `ssh-keys` metadata entry that authorizes it.

Owns `ensure_client_key()` (load the key, or generate an ed25519 key on first use and write it
atomically with mode 0600) and the node metadata format helpers. The runtime calls
`ensure_client_key()` once at start-up with `[ssh] key` from the config, puts
`ssh_keys_metadata_entry()` into every node it creates, and hands the key to the fan-out.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

import asyncssh


class KeyFileError(Exception):
    """The key file exists but cannot be used; the message says what to do."""


# Linux user names as gcloud accepts them for ssh-keys entries: no ':' and no whitespace.
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


def ensure_client_key(
    path: str | os.PathLike[str], *, comment: str = "tpucared"
) -> asyncssh.SSHKey:
    """Return the private key at `path`, generating an ed25519 key there if it is missing.

    A key readable or writable by group/others is refused (as OpenSSH refuses it): it is the
    credential to every worker of every fleet. A newly created parent directory gets mode 0700.
    The write is atomic and never clobbers a key another process wrote concurrently.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return _generate(p, comment)
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"SSH key {p} is not a regular file")
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"SSH key {p} is accessible by group/others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"it must be private: chmod 600 {p}"
        )
    try:
        return asyncssh.read_private_key(p)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise KeyFileError(
            f"cannot load SSH key {p}: {exc} (tpucared needs an unencrypted private key; "
            "delete the file to have a new ed25519 key generated)"
        ) from exc


def _generate(p: Path, comment: str) -> asyncssh.SSHKey:
    if not p.parent.exists():
        p.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(p.parent, 0o700)  # mkdir's mode is filtered by the umask
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    _write_new(p, key.export_private_key("openssh"), 0o600)
    # Another process may have won the race; whatever is at `p` now is the key.
    key = asyncssh.read_private_key(p)
    pub = p.with_name(p.name + ".pub")
    if not pub.exists():
        _write_new(pub, key.export_public_key("openssh"), 0o644)
    return key


def _write_new(p: Path, data: bytes, mode: int) -> None:
    """Write `data` to `p` atomically with `mode`, unless `p` already exists.

    The file is written under a temporary name (created with the final mode, so the secret is
    never readable by others even briefly), fsynced, then hard-linked into place: link() fails
    if the name exists, which rename() would silently overwrite.
    """
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # os.open's mode is filtered by the umask
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        # Losing the race to another process is fine: its key is the key.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(p.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def openssh_public_key(key: asyncssh.SSHKey) -> str:
    """`ssh-ed25519 AAAA...` without a comment: the form pinned, stored and compared."""
    algorithm, blob = key.export_public_key("openssh").decode().split()[:2]
    return f"{algorithm} {blob}"


def ssh_keys_metadata_entry(user: str, key: asyncssh.SSHKey) -> str:
    """The node `ssh-keys` metadata line for `key`: `user:ssh-ed25519 AAAA... user`.

    The guest agent on the worker creates `user` (with passwordless sudo) and installs the key.
    """
    if not _USER_RE.match(user):
        raise ValueError(f"invalid SSH user name {user!r} for ssh-keys metadata")
    return f"{user}:{openssh_public_key(key)} {user}"


def add_ssh_keys_entry(existing: str | None, entry: str) -> str:
    """Merge `entry` into an `ssh-keys` metadata value (one entry per line), idempotently.

    Entries of other users and other keys are kept; an identical key for the same user is
    replaced rather than duplicated.
    """
    user, _, rest = entry.partition(":")
    blob = rest.split()[1] if len(rest.split()) > 1 else rest
    kept = []
    for line in (existing or "").splitlines():
        if not line.strip():
            continue
        other_user, _, other_rest = line.partition(":")
        other_fields = other_rest.split()
        if other_user == user and len(other_fields) > 1 and other_fields[1] == blob:
            continue
        kept.append(line)
    kept.append(entry)
    return "\n".join(kept)
