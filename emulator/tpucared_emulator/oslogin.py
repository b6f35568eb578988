"""The emulated OS Login API, and the metadata server's view of it that a VM's sshd asks.

Real OS Login: an account imports an SSH public key into its login profile
(`POST /v1/users/{email}:importSshPublicKey`, an optional `expirationTimeUsec`); the profile
names the account's POSIX user (`sa_<uniqueId>` for a service account, the e-mail with every
other character turned into `_` for a person); a VM with OS Login enforced lets that user in
with those keys only, and ignores `ssh-keys` metadata. On the VM, sshd's
`AuthorizedKeysCommand` asks the metadata server
(`/computeMetadata/v1/oslogin/users?username=U`) for the user's profile.

Served here on the emulator's own port, whatever `--os-login` says (the API exists in every
project); `--os-login` makes the simulated workers enforce it (hosts/worker.py asks
`authorized`). A project is not part of a profile: a profile belongs to the account.
Keys are identified by the SHA-256 of the key blob, hex, as the real API's fingerprints are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncssh
from aiohttp import web

from tpucared_emulator import errors

USERS_PREFIX = "/v1/users/"
METADATA_USERS = "/computeMetadata/v1/oslogin/users"
_IMPORT = ":importSshPublicKey"
_EMAIL = re.compile(r"[^@\s/]+@[^@\s/]+\.[^@\s/]+")
_SERVICE_ACCOUNT = re.compile(r".+@.+\.gserviceaccount\.com")


@dataclass
class _Key:
    key: str  # as imported: "ssh-ed25519 AAAA... comment"
    blob: bytes
    expiration_usec: int | None


@dataclass
class _Profile:
    email: str
    keys: dict[str, _Key] = field(default_factory=dict)  # by fingerprint


def posix_username(email: str) -> str:
    """The POSIX user OS Login gives an account: `sa_` and 21 digits for a service account
    (derived here from the e-mail, fixed per account), else the e-mail made shell-safe."""
    if _SERVICE_ACCOUNT.fullmatch(email):
        digits = int.from_bytes(hashlib.sha256(email.encode()).digest()[:9], "big")
        return "sa_1" + f"{digits:020d}"[-20:]
    return re.sub(r"[^a-z0-9]", "_", email.lower())


class OsLoginRegistry:
    """Every account's login profile. `now_usec` is the emulator clock, in microseconds."""

    def __init__(self, now_usec: Callable[[], int]) -> None:
        self._now_usec = now_usec
        self._profiles: dict[str, _Profile] = {}

    def _profile(self, email: str) -> _Profile:
        if not _EMAIL.fullmatch(email):
            raise errors.invalid_argument(f"Invalid user: {email}")
        return self._profiles.setdefault(email, _Profile(email))

    def _live(self, key: _Key) -> bool:
        return key.expiration_usec is None or key.expiration_usec > self._now_usec()

    def login_profile(self, email: str) -> dict[str, Any]:
        p = self._profile(email)
        # Expired keys are gone from the profile, as the real API drops them.
        p.keys = {fp: k for fp, k in p.keys.items() if self._live(k)}
        user = posix_username(email)
        return {
            "name": email,
            "posixAccounts": [
                {
                    "primary": True,
                    "username": user,
                    "uid": str(2000 + int(hashlib.sha256(user.encode()).hexdigest()[:6], 16)),
                    "gid": str(2000 + int(hashlib.sha256(user.encode()).hexdigest()[:6], 16)),
                    "homeDirectory": f"/home/{user}",
                    "shell": "/bin/bash",
                    "operatingSystemType": "LINUX",
                    "accountId": "emulator",
                    "name": f"users/{email}/projects/emulator",
                }
            ],
            "sshPublicKeys": {
                fp: {
                    "key": k.key,
                    "fingerprint": fp,
                    "name": f"users/{email}/sshPublicKeys/{fp}",
                    **(
                        {"expirationTimeUsec": str(k.expiration_usec)}
                        if k.expiration_usec is not None
                        else {}
                    ),
                }
                for fp, k in sorted(p.keys.items())
            },
        }

    def import_key(self, email: str, body: dict[str, Any]) -> dict[str, Any]:
        profile = self._profile(email)
        text = body.get("key")
        if not isinstance(text, str) or not text.strip():
            raise errors.invalid_argument("sshPublicKey.key is required")
        try:
            blob = asyncssh.import_public_key(text.strip()).public_data
        except (asyncssh.KeyImportError, ValueError):
            raise errors.invalid_argument("Invalid SSH public key") from None
        expiry: int | None = None
        raw = body.get("expirationTimeUsec")
        if raw is not None:
            try:
                expiry = int(raw)
            except (TypeError, ValueError):
                raise errors.invalid_argument("Invalid expirationTimeUsec") from None
        fingerprint = hashlib.sha256(blob).hexdigest()
        profile.keys[fingerprint] = _Key(text.strip(), blob, expiry)
        return {"loginProfile": self.login_profile(email)}

    def delete_key(self, email: str, fingerprint: str) -> dict[str, Any]:
        profile = self._profile(email)
        if profile.keys.pop(fingerprint, None) is None:
            raise errors.not_found(f"users/{email}/sshPublicKeys/{fingerprint}")
        return {}

    def by_username(self, username: str) -> str | None:
        """The account whose POSIX user is `username` (among accounts seen), or None."""
        for email in self._profiles:
            if posix_username(email) == username:
                return email
        return None

    def authorized(self, username: str, key: asyncssh.SSHKey) -> bool:
        """Whether `username` may log in with `key`: a live key of that user's profile."""
        email = self.by_username(username)
        if email is None:
            return False
        return any(
            k.blob == key.public_data and self._live(k) for k in self._profiles[email].keys.values()
        )


class OsLoginApi:
    """The HTTP side: the v1 users calls and the metadata server's `oslogin/users`."""

    def __init__(self, registry: OsLoginRegistry) -> None:
        self._registry = registry

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", USERS_PREFIX + "{tail:.*}", self.users)
        app.router.add_get(METADATA_USERS, self.metadata_users)

    async def users(self, request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        r = self._registry
        if request.method == "POST" and tail.endswith(_IMPORT):
            body = await _json_body(request)
            return web.json_response(r.import_key(tail[: -len(_IMPORT)], body))
        user, _, rest = tail.partition("/")
        if request.method == "GET" and rest == "loginProfile":
            return web.json_response(r.login_profile(user))
        if request.method == "DELETE" and rest.startswith("sshPublicKeys/"):
            return web.json_response(r.delete_key(user, rest.removeprefix("sshPublicKeys/")))
        raise errors.not_found(request.path)

    async def metadata_users(self, request: web.Request) -> web.Response:
        # The metadata server answers only requests that say they mean it.
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        email = self._registry.by_username(request.query.get("username", ""))
        if email is None:
            return web.Response(status=404, text="user not found")
        return web.json_response({"loginProfiles": [self._registry.login_profile(email)]})


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise errors.invalid_argument("Invalid JSON payload received.") from None
    if not isinstance(body, dict):
        raise errors.invalid_argument("Invalid JSON payload received.")
    return body
