"""Where the client's Authorization header comes from.

`TokenSource` (the Cloud port's, tpucared/ports/cloud.py) is all the client knows:
`authorization()` gives the header value (or None for emulators), `invalidate(rejected)` says
the server refused that value (a 401), `account()` names the service account (for OS Login),
and `aclose()` releases what the source holds. `load_token_source` turns the config's
`[gcp] credentials` setting into one:

- "none": `NoAuth`, for the emulator.
- "default": Application Default Credentials (the GCE metadata server, then
  GOOGLE_APPLICATION_CREDENTIALS, then gcloud's ADC file).
- anything else: the path of a service-account key file or an ADC user file.

`GoogleTokenSource` refreshes google-auth credentials in a worker thread (google-auth is
synchronous and would block the event loop for a whole HTTPS round trip), a few minutes
BEFORE they expire so no request ever leaves with a token about to die, and behind a lock so
concurrent callers share one refresh.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import google.auth
import google.auth.exceptions
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from tpucared.gcp.errors import classify_refresh_error
from tpucared.ports.cloud import TokenSource as TokenSource  # re-exported: gcp.TokenSource

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class CredentialsError(Exception):
    """The `credentials` setting cannot give us credentials. Raised at start-up."""


class NoAuth:
    """No Authorization header: for `credentials = "none"` (the emulator)."""

    async def authorization(self) -> str | None:
        return None

    async def invalidate(self, rejected: str | None = None) -> None:
        return None

    async def account(self) -> str | None:
        return None

    async def aclose(self) -> None:
        return None


def _utcnow() -> datetime:
    return datetime.now(UTC)


class GoogleTokenSource:
    """OAuth access tokens from google-auth credentials, refreshed off the event loop.

    `refresh_margin` (seconds): refresh once fewer remain before expiry. `clock` returns an
    aware UTC datetime and exists for tests. `refreshes` counts completed refreshes.
    """

    def __init__(
        self,
        credentials: Any,
        *,
        refresh_margin: float = 300.0,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        # Imported here: only real credentials need the requests transport.
        import google.auth.transport.requests

        self._credentials = credentials
        self._margin = timedelta(seconds=refresh_margin)
        self._clock = clock
        self._lock = asyncio.Lock()
        self._stale = False
        # One HTTP session for all refreshes (connection reuse); closed by aclose().
        self._request: Any = google.auth.transport.requests.Request()
        self.refreshes = 0

    def _current(self) -> str | None:
        token = self._credentials.token
        return f"Bearer {token}" if token else None

    def _fresh(self) -> bool:
        if self._stale or not self._credentials.token:
            return False
        expiry: datetime | None = self._credentials.expiry
        if expiry is None:
            return True  # a token without an expiry lives until a 401 says otherwise
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)  # google-auth keeps naive UTC datetimes
        return expiry - self._clock() > self._margin

    async def authorization(self) -> str | None:
        if not self._fresh():
            async with self._lock:
                # Whoever waited on the lock finds the token the first caller fetched.
                if not self._fresh():
                    await self._refresh()
        return self._current()

    async def _refresh(self) -> None:
        try:
            await asyncio.to_thread(self._credentials.refresh, self._request)
        except google.auth.exceptions.GoogleAuthError as exc:
            raise classify_refresh_error(exc) from exc
        self._stale = False
        self.refreshes += 1

    async def account(self) -> str | None:
        """The service account e-mail of these credentials, or None (a person's ADC).
        Metadata-server credentials learn theirs on the first refresh ("default" before)."""
        email = getattr(self._credentials, "service_account_email", None)
        if email == "default":
            await self.authorization()
            email = getattr(self._credentials, "service_account_email", None)
        return email if isinstance(email, str) and "@" in email else None

    async def invalidate(self, rejected: str | None = None) -> None:
        if rejected is not None and rejected != self._current():
            return  # someone already replaced the token the server refused
        self._stale = True

    async def aclose(self) -> None:
        session = getattr(self._request, "session", None)
        if session is not None:
            session.close()


def load_token_source(setting: str) -> TokenSource:
    """The token source for the config's `[gcp] credentials` value ("none", "default", a path).

    Blocking (ADC may probe the metadata server): call it at start-up, before the daemon's
    loops run. Errors name the setting or the file, never its contents.
    """
    if setting == "none":
        return NoAuth()
    if setting == "default":
        try:
            credentials, _project = google.auth.default(scopes=list(SCOPES))
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise CredentialsError(
                f'credentials = "default": no Application Default Credentials found ({exc})'
            ) from exc
        return GoogleTokenSource(credentials)
    if not setting.strip():
        raise CredentialsError('credentials must be "default", "none" or a key file path')
    return GoogleTokenSource(load_key_file(os.path.expanduser(setting)))


# Fields each accepted key file type must have; checked here so that google-auth's own
# errors, which we do not print, are left for a malformed private key only.
_REQUIRED = {
    "service_account": ("client_email", "private_key", "token_uri"),
    "authorized_user": ("client_id", "client_secret", "refresh_token"),
}


def load_key_file(path: str) -> Any:
    """google-auth credentials from a service-account key or an ADC user file.

    Only those two types are accepted (google-auth's generic loader is deprecated because
    other types, e.g. external_account configs, can run programs). Errors name the file and
    the problem, never its contents.
    """
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except FileNotFoundError:
        raise CredentialsError(f"credentials file {path} does not exist") from None
    except IsADirectoryError:
        raise CredentialsError(f"credentials file {path} is a directory") from None
    except PermissionError:
        raise CredentialsError(f"credentials file {path} is not readable by this user") from None
    except OSError as exc:
        raise CredentialsError(f"cannot read credentials file {path}: {exc.strerror}") from None
    except ValueError:
        raise CredentialsError(f"credentials file {path} is not valid JSON") from None
    kind = info.get("type") if isinstance(info, dict) else None
    if kind not in _REQUIRED:
        raise CredentialsError(
            f"credentials file {path} has type {kind!r}: expected a service_account key or an "
            'authorized_user file (other kinds: credentials = "default" with '
            "GOOGLE_APPLICATION_CREDENTIALS)"
        )
    missing = [name for name in _REQUIRED[kind] if not info.get(name)]
    if missing:
        raise CredentialsError(f"credentials file {path} lacks {', '.join(missing)}")
    # Untyped in google-auth, hence Any.
    factory: Any = (
        service_account.Credentials.from_service_account_info
        if kind == "service_account"
        else user_credentials.Credentials.from_authorized_user_info
    )
    try:
        return factory(info, scopes=list(SCOPES))
    except (ValueError, TypeError) as exc:
        raise CredentialsError(
            f"credentials file {path}: its private key or a field is malformed"
        ) from exc
