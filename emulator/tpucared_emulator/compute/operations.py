"""The emulated Compute Engine's operations (zonal, regional, global) and requestId memory.

`OperationBook` is the part of compute/book.py's `ComputeBook` (its subclass) that records
operations: their names (`operation-...`, `systemevent-...` for the system's), the requestIds
that replay them (`compute_request_id_replay`, research §9 row 5), the oldest DONE ones dropped
beyond `max_operations`; and the book's clock, ids and zone check, which they use. The records
themselves are `ZoneOperation`s (compute/resources.py); the book sets the attributes declared
here.
"""

from __future__ import annotations

import random
import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING

from tpucared_emulator.catalog import Catalog
from tpucared_emulator.compute import errors
from tpucared_emulator.compute.errors import OpError
from tpucared_emulator.compute.hooks import Target
from tpucared_emulator.compute.resources import Instance, ZoneOperation

if TYPE_CHECKING:
    from tpucared_emulator.options import EmulatorOptions
    from tpucared_emulator.state import EmulatorState

USER = "emulated-user@example.com"  # who the API calls are by: there is no authentication


class OperationBook:
    """Operations by key (`projects/p/{zones/z|regions/r|global}/operations/n`)."""

    state: EmulatorState
    options: EmulatorOptions
    catalog: Catalog
    _rng: random.Random
    ops: OrderedDict[str, ZoneOperation]
    _request_ids: dict[tuple[str, str, str], str]  # (project, scope, id) -> operation name

    def now(self) -> float:
        return self.state.now()

    def random(self) -> float:
        return self._rng.random()

    def uid(self) -> int:
        """A new resource id (a uint64, never 0)."""
        return self._rng.getrandbits(63) or 1

    # -----------------------------------------------------------------------------------------
    # Zones and operations.

    def check_zone(self, project: str, zone: str) -> None:
        if not self.catalog.has_compute_zone(zone):
            raise errors.not_found(f"projects/{project}/zones/{zone}")

    def new_operation(
        self,
        project: str,
        zone: str,
        operation_type: str,
        target: Target,
        *,
        user: str = USER,
        request_id: str | None = None,
        scope: str | None = None,
    ) -> ZoneOperation:
        """A RUNNING operation; `scope` (`regions/r`, `global`) for a regional or global one,
        whose `zone` is then unused."""
        now = self.now()
        if user == "system":
            name = f"systemevent-{int(now * 1000)}-{secrets.token_hex(6)}"
        else:
            name = f"operation-{int(now * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}"
        op = ZoneOperation(
            project=project,
            zone=zone,
            name=name,
            uid=self._rng.getrandbits(63) or 1,
            operation_type=operation_type,
            target_link=target.self_link,
            target_id=target.uid,
            user=user,
            insert_time=now,
            request_id=request_id,
            scope=scope,
        )
        self.ops[op.key] = op
        if request_id is not None and self.options.compute_request_id_replay == "same_operation":
            self._request_ids[(project, op.scope, request_id)] = name
        self._trim_operations()
        return op

    def _trim_operations(self) -> None:
        for _ in range(len(self.ops) - self.options.max_operations):
            key, oldest = next(iter(self.ops.items()))
            if oldest.done:
                del self.ops[key]
                if oldest.request_id is not None:  # forgotten with its operation
                    self._request_ids.pop((oldest.project, oldest.scope, oldest.request_id), None)
            else:
                self.ops.move_to_end(key)

    def replayed(
        self, project: str, zone: str, request_id: str | None, scope: str | None = None
    ) -> ZoneOperation | None:
        """The operation an earlier request with this requestId started (research §9 row 5)."""
        if request_id is None:
            return None
        scope = scope or f"zones/{zone}"
        name = self._request_ids.get((project, scope, request_id))
        return self.ops.get(f"projects/{project}/{scope}/operations/{name}") if name else None

    def operation(self, project: str, zone: str, name: str) -> ZoneOperation:
        self.check_zone(project, zone)
        op = self.ops.get(f"projects/{project}/zones/{zone}/operations/{name}")
        if op is None:
            raise errors.not_found(f"projects/{project}/zones/{zone}/operations/{name}")
        return op

    def finish_op(self, op_name: str | None, inst: Instance, error: OpError | None = None) -> None:
        op = self.ops.get(f"projects/{inst.project}/zones/{inst.zone}/operations/{op_name}")
        if op is not None:
            op.finish(self.now(), error)
