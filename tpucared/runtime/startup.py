"""What the commands that talk to the cloud set up before their first call, and the errors a
person must fix before any of them can start.

`node_template` makes sure the daemon's SSH client key exists (generated on first start) and
turns it into the `ssh-keys` metadata every node is created with (`enable-oslogin` under OS
Login, oslogin.py); `os_login_key` is the same key's public half as OS Login imports it;
`token_source` builds the credentials of `[gcp] credentials`. Their failures are
`StartupError`s: the CLI prints the one-line message and exits 2 (like a bad config), because
retrying cannot help.

A wiring module: with clouds.py and workload/launchers.py, the only runtime modules that name
the implementations (tpucared/gcp, tpucared/ssh); the rest of the runtime gets what they make
through the ports (import-linter's "the runtime talks to ports" contract).
"""

from __future__ import annotations

import asyncssh

from tpucared.config import Config
from tpucared.gcp import CredentialsError, load_token_source
from tpucared.ports.cloud import TokenSource
from tpucared.runtime.errors import StartupError
from tpucared.runtime.nodes.calls import NodeTemplate
from tpucared.ssh.keys import (
    KeyFileError,
    ensure_client_key,
    openssh_public_key,
    ssh_keys_metadata_entry,
)

__all__ = ["StartupError", "node_template", "os_login_key", "public_key_line", "token_source"]


def node_template(config: Config) -> NodeTemplate:
    """Load or generate `[ssh] key`; every node we create authorizes its public half, in
    `ssh-keys` metadata, or (OS Login) through the login profile, with OS Login turned on."""
    try:
        key = ensure_client_key(config.ssh.key)
        entry = ssh_keys_metadata_entry(config.ssh.user, key)
    except (KeyFileError, OSError, ValueError) as exc:
        raise StartupError(f"{config.path}: ssh.key: {exc}") from exc
    # Under OS Login, ssh-keys would be ignored; none are sent, so no key sits in metadata.
    metadata = {"enable-oslogin": "TRUE"} if config.ssh.os_login else {"ssh-keys": entry}
    return NodeTemplate(
        project=config.gcp.project,
        metadata=metadata,
        # gcloud's default; without it nobody outside the VPC can reach the workers.
        enable_external_ips=not config.ssh.internal_ip,
        options={f.name: f.node for f in config.fleets},
    )


def token_source(config: Config) -> TokenSource:
    """Blocking (ADC may ask the metadata server): call it off the event loop."""
    try:
        return load_token_source(config.gcp.credentials)
    except CredentialsError as exc:
        raise StartupError(f"{config.path}: gcp.credentials: {exc}") from exc


def public_key_line(key: asyncssh.SSHKey, owner: str) -> str:
    """What OS Login imports: "ssh-ed25519 AAAA... tpucared:<owner>". The comment marks the
    keys this daemon may delete again (runtime/oslogin.py); the blob says which is current."""
    return f"{openssh_public_key(key)} tpucared:{owner}"


def os_login_key(config: Config) -> str:
    """`[ssh] key`'s `public_key_line`. Blocking (reads the key file). The key is never made
    here: the daemon's `node_template` makes it first, and a command run by hand must not
    make one no node accepts."""
    if not config.ssh.key.exists():
        raise StartupError(f"no SSH key at {config.ssh.key}: the daemon creates it when it starts")
    try:
        key = ensure_client_key(config.ssh.key)
    except KeyFileError as exc:
        raise StartupError(f"{config.path}: ssh.key: {exc}") from exc
    return public_key_line(key, config.daemon.owner)
