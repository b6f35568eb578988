"""`OsLoginClient`: the three OS Login v1 calls the daemon makes, on a Google client's request
path (the TPU client's, or the Compute Engine client's: any `RestClient`).

With `[ssh] os_login = true` a TPU VM lets in only keys imported into an account's login
profile, as that profile's POSIX user. The daemon imports its own public key
(`users/{account}:importSshPublicKey`, with an expiry), reads the username from the profile
the call returns, and deletes keys of its own that are no longer its key
(`users/{account}/sshPublicKeys/{fingerprint}`). `loginProfile` reads the profile without
changing it. Requests go through `RestClient.request`, so they are authenticated by the same
credentials and classified, retried and counted like TPU API calls (403 -> PERMISSION, 429
and 5xx retried).

The endpoint is oslogin.googleapis.com, unless the TPU API endpoint is not Google's: an
emulator serves both APIs on one port (`endpoint_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from tpucared.gcp.errors import malformed_response
from tpucared.ports.cloud import LoginProfile, ProfileKey

__all__ = ["LoginProfile", "OsLoginClient", "ProfileKey", "endpoint_for"]
from tpucared.gcp.rest import RestClient
from tpucared.gcp.tpu.client import DEFAULT_ENDPOINT

OSLOGIN_ENDPOINT = "https://oslogin.googleapis.com"


def endpoint_for(tpu_endpoint: str) -> str:
    """Google's OS Login for Google's TPU API; the same server for an emulator's."""
    return OSLOGIN_ENDPOINT if tpu_endpoint.rstrip("/") == DEFAULT_ENDPOINT else tpu_endpoint


class OsLoginClient:
    """The Cloud port's `OsLogin` capability for Google clouds (the values are the port's)."""

    def __init__(self, client: RestClient, endpoint: str = OSLOGIN_ENDPOINT) -> None:
        self._client = client
        self._base = endpoint.rstrip("/") + "/v1/users/"

    def _user(self, account: str) -> str:
        return self._base + quote(account, safe="@")

    async def import_key(
        self, account: str, public_key: str, *, expires: datetime | None
    ) -> LoginProfile:
        body: dict[str, Any] = {"key": public_key}
        if expires is not None:
            body["expirationTimeUsec"] = str(int(expires.timestamp() * 1_000_000))
        url = self._user(account) + ":importSshPublicKey"
        data = await self._client.request("oslogin.importSshPublicKey", "POST", url, body=body)
        return _profile(data.get("loginProfile"), url)

    async def login_profile(self, account: str) -> LoginProfile:
        url = self._user(account) + "/loginProfile"
        return _profile(await self._client.request("oslogin.getLoginProfile", "GET", url), url)

    async def delete_key(self, account: str, fingerprint: str) -> None:
        url = self._user(account) + "/sshPublicKeys/" + quote(fingerprint, safe="")
        await self._client.request("oslogin.sshPublicKeys.delete", "DELETE", url)


def _profile(data: object, url: str) -> LoginProfile:
    """The login profile of a response, or MALFORMED when it names no POSIX user."""
    if not isinstance(data, Mapping):
        raise malformed_response(200, str(data)[:200], method="GET", url=url, why="no profile")
    accounts = [a for a in data.get("posixAccounts") or () if isinstance(a, Mapping)]
    primary = [a for a in accounts if a.get("primary")] or accounts
    username = primary[0].get("username") if primary else None
    if not isinstance(username, str) or not username:
        raise malformed_response(
            200, "", method="GET", url=url, why="the login profile has no POSIX username"
        )
    keys = []
    raw_keys = data.get("sshPublicKeys") or {}
    for fingerprint, entry in raw_keys.items() if isinstance(raw_keys, Mapping) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("key"), str):
            continue
        expiry = entry.get("expirationTimeUsec")
        keys.append(
            ProfileKey(
                fingerprint=str(entry.get("fingerprint") or fingerprint),
                key=entry["key"],
                expires_usec=int(str(expiry)) if str(expiry or "").isdigit() else None,
            )
        )
    return LoginProfile(username=username, keys=tuple(keys))
