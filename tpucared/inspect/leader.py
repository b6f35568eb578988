"""Which daemon leads, as `tpucared status` and `/v1/status` show it (the leader lease).

`leader_doc` is the `leader` object of the status document: the holder (host, pid), its epoch,
since when it leads, its last renewal and expiry (the database's clock), and `warning` when the
lease is stale (core/leadership/lease.py `stale`: nobody leads, or the leader's renewals stopped:
a standby should have taken over). `leader_lines` is the human form, under the fleet table.
A database from before the lease (migration 0005), or one no daemon has run on, shows nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tpucared.core.leadership.lease import Lease, Role, expired, stale
from tpucared.inspect.fmt import duration, iso


def leader_doc(lease: Lease | None, now: datetime, role: Role | None = None) -> dict[str, Any]:
    """`role`: the role of the daemon serving the document (`/v1/status`), if any."""
    doc: dict[str, Any] = {}
    if role is not None:
        doc["role"] = str(role)
    if lease is None:
        return doc
    holder = lease.holder
    doc.update(
        {
            "epoch": lease.epoch,
            "host": None if holder is None else holder.host,
            "pid": None if holder is None else holder.pid,
            "since": iso(lease.acquired_at),
            "renewed_at": iso(lease.renewed_at),
            "expires_at": iso(lease.expires_at),
            "held": not expired(lease, now),
            "warning": stale(lease, now),
        }
    )
    return doc


def leader_lines(lease: Lease | None, now: datetime) -> list[str]:
    if lease is None or lease.holder is None:
        return []
    h = lease.holder
    warning = stale(lease, now)
    if warning is None and lease.acquired_at is not None:
        since = f"{iso(lease.acquired_at)} ({duration(now - lease.acquired_at)})"
        return [f"leader: {h.host} pid {h.pid}, epoch {lease.epoch}, since {since}"]
    return [f"leader: WARNING: {warning} (last: {h.host} pid {h.pid}, epoch {lease.epoch})"]
