"""What the commands that talk to the cloud set up before their first call, and the errors a
person must fix before any of them can start.

`node_template` makes sure the daemon's SSH client key exists (generated on first start) and
turns it into the `ssh-keys` metadata every node is created with (`enable-oslogin` under OS
Login, oslogin.py); `token_source` builds the
credentials of `[gcp] credentials`. Their failures are `StartupError`s: the CLI prints the
one-line message and exits 2 (like a bad config), because retrying cannot help.
"""

from __future__ import annotations

from tpucared.config import Config
from tpucared.gcp import CredentialsError, TokenSource, load_token_source
from tpucared.runtime.errors import StartupError
from tpucared.runtime.nodes.calls import NodeTemplate
from tpucared.ssh.keys import KeyFileError, ensure_client_key, ssh_keys_metadata_entry

__all__ = ["StartupError", "node_template", "token_source"]


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
