"""OS Login: the daemon's SSH key imported into its account's login profile, and kept there.

With `[ssh] os_login = true`, `start_os_login` runs once at start-up, before anything logs in:
it finds the account (`ssh.os_login_account`, else the credentials' service account), imports
the daemon's public key (its line made by the wiring, startup.py `os_login_key`) with an
expiry of `KEY_TTL_S`, takes the POSIX username from the
profile the import returns (the user every SSH login then uses, instead of `ssh.user`), and
deletes the keys of this daemon's that are no longer its key (a rotated `ssh.key`: same
comment `tpucared:<owner>`, another key). A refusal a person must fix (PERMISSION: the
account lacks roles/compute.osAdminLogin or osLogin; INVALID; MALFORMED) is a StartupError;
an outage that outlasted the client's retries propagates, and the service manager restarts.

`OsLoginKeeper.run` is a root task of the daemon: it imports the key again once half its life
has passed, so it never expires under a running daemon; a failed renewal is logged and tried
again every `RETRY_S`, while the imported key still has hours to live.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import structlog

from tpucared.config import Config
from tpucared.core.model.specs import DEFAULT_API, ErrorKind
from tpucared.ports.cloud import CloudError, Clouds, LoginProfile, OsLogin, TokenSource
from tpucared.runtime.clock import Clock
from tpucared.runtime.clouds import connect_clouds
from tpucared.runtime.errors import StartupError
from tpucared.runtime.startup import os_login_key

log = structlog.get_logger(__name__)

KEY_TTL_S = 24 * 3600.0  # an imported key's life; renewed at half of it
RETRY_S = 60.0  # between failed renewals
# Kinds a restart cannot help with: a person must change IAM or the config.
_FATAL = frozenset({ErrorKind.PERMISSION, ErrorKind.INVALID, ErrorKind.MALFORMED})


@dataclass
class OsLoginKeeper:
    oslogin: OsLogin
    account: str
    key_line: str
    clock: Clock
    ttl: float = KEY_TTL_S
    username: str = ""
    expires: datetime | None = None
    renewals: int = field(default=0)

    async def ensure(self) -> str:
        """Import the key (a fresh expiry), drop our stale keys; the POSIX username."""
        expires = self.clock.now() + timedelta(seconds=self.ttl)
        profile = await self.oslogin.import_key(self.account, self.key_line, expires=expires)
        self.expires = expires
        self.username = profile.username
        await self._drop_stale(profile)
        return profile.username

    async def _drop_stale(self, profile: LoginProfile) -> None:
        _, blob, comment = self.key_line.split(maxsplit=2)
        for k in profile.keys:
            if k.comment != comment or k.blob == blob:
                continue
            try:
                await self.oslogin.delete_key(self.account, k.fingerprint)
            except CloudError as exc:  # tried again at the next renewal
                log.warning("oslogin.stale_key_delete_failed", error=str(exc))
            else:
                log.info("oslogin.stale_key_deleted", fingerprint=k.fingerprint[:16])

    def _renew_in(self) -> float:
        if self.expires is None:
            return 0.0
        due = self.expires - timedelta(seconds=self.ttl / 2)
        return max(0.0, (due - self.clock.now()).total_seconds())

    async def run(self, stop: asyncio.Event) -> None:
        """Renew until `stop` is set."""
        wait = self._renew_in()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
            if stop.is_set():
                return
            try:
                await self.ensure()
            except CloudError as exc:
                left = (self.expires - self.clock.now()).total_seconds() if self.expires else 0
                log.warning(
                    "oslogin.key_renewal_failed", error=str(exc), key_expires_in_s=round(left)
                )
                wait = RETRY_S
                continue
            self.renewals += 1
            log.info("oslogin.key_renewed", user=self.username)
            wait = self._renew_in()


async def account_of(config: Config, tokens: TokenSource) -> str:
    """The OS Login account: the configured one, else the credentials' service account."""
    if config.ssh.os_login_account is not None:
        return config.ssh.os_login_account
    found = await tokens.account()
    if found is None:
        raise StartupError(
            f"{config.path}: ssh.os_login: the credentials name no service account; "
            "set ssh.os_login_account to the account whose login profile the daemon uses"
        )
    return found


def oslogin_of(config: Config, clouds: Clouds) -> OsLogin:
    """The OS Login calls of the clouds (the TPU API's, whose credentials the daemon's
    account is); StartupError when that cloud has none."""
    found = clouds[DEFAULT_API].oslogin if DEFAULT_API in clouds else None
    if found is None:
        raise StartupError(f"{config.path}: ssh.os_login: the cloud offers no OS Login")
    return found


async def start_os_login(
    config: Config, oslogin: OsLogin, tokens: TokenSource, key_line: str, clock: Clock
) -> OsLoginKeeper:
    """Import `key_line` (startup.py `os_login_key`) and learn the username (module
    docstring); StartupError if refused."""
    account = await account_of(config, tokens)
    keeper = OsLoginKeeper(oslogin, account, key_line, clock)
    try:
        user = await keeper.ensure()
    except CloudError as exc:
        if exc.kind in _FATAL:
            raise StartupError(
                f"{config.path}: ssh.os_login: importing the SSH key for {account} failed: "
                f"{exc} (the account needs roles/compute.osAdminLogin or roles/compute.osLogin)"
            ) from exc
        raise
    log.info("oslogin.key_imported", account=account, user=user)
    return keeper


async def os_login_config(config: Config, clock: Clock) -> Config:
    """`config` with `ssh.user` the OS Login user, for commands that log in by hand (logs,
    exec, cp), beside the daemon or without it: the key is imported again (which only
    moves its expiry), so these work even when no daemon has renewed it lately. The key
    is never generated here: no node would accept a new one."""
    if not config.ssh.os_login:
        return config
    if not config.ssh.key.exists():
        raise StartupError(f"no SSH key at {config.ssh.key}: the daemon creates it when it starts")
    from tpucared.runtime.resources import credentials  # the CLI's path only

    tokens = await credentials(config)
    key_line = await asyncio.to_thread(os_login_key, config)
    clouds = connect_clouds(config, tokens)
    try:
        keeper = await start_os_login(config, oslogin_of(config, clouds), tokens, key_line, clock)
    finally:
        for cloud in clouds.values():
            await cloud.aclose()
    return replace(config, ssh=replace(config.ssh, user=keeper.username))
