"""Managed instance groups: the records (`Mig`, `Member`) and what a group does on its own.

`Migs` attaches itself to the book (compute/book.py) as its `groups`: the book tells it when a
member changes and fires its timers; compute/mig_requests.py serves the calls. Every member is
an instance of the book, created by the book's one creation function (`create_instance`), so it
is listed by instances.list, counts against the same capacity, is a simulated worker host, and
the control API's `:preempt` / `:terminate` / `:vanish` work on it; a flex-start template's
members get whatever the book does for flex-start VMs.

A group (docs/research/compute-engine.md sections 6.3-6.5, §9 rows 11-15) reconciles whenever a
member changes and every `compute_mig_retry_seconds` while it has work:
    INDIVIDUAL   each member created on its own; a failed create (stockout, quota) shows in that
                 member's `lastAttempt.errors` with `currentAction: CREATING`, and is retried
    BULK         nothing created until (zone, machine type) has room for targetSize at once;
                 meanwhile `status.bulkInstanceOperation {inProgress: true, lastProgressCheck
                 {timestamp, error}}`; then every member at once
    member lost  (preempted, terminated, vanished): left TERMINATED or gone (DO_NOTHING with
                 `compute_mig_on_member_loss` "leave"), or created again under the same name
                 (REPAIR, or "recreate_member")
    deleted      every member deleted (STOPPING -> gone); the group and its delete operation
                 end when the last is gone
Members' worker ids are in their metadata (`agent-worker-number`, `tpu-env`'s WORKER_ID, per
`compute_worker_id_source`), in name order or shuffled (`compute_mig_worker_order`).
"""

from __future__ import annotations

import copy
import random
import string
from typing import TYPE_CHECKING, Any

from tpucared_emulator.catalog import MachineType
from tpucared_emulator.clock import rfc3339
from tpucared_emulator.compute.book import CREATING, ComputeBook
from tpucared_emulator.compute.errors import OpError
from tpucared_emulator.compute.resources import API, Instance, _fingerprint_of, zone_url
from tpucared_emulator.compute.shared import Policy, Shared, Template
from tpucared_emulator.projects import project_number

if TYPE_CHECKING:
    from tpucared_emulator.compute.resources import ZoneOperation

_WORKER_KEYS = ("created-by", "agent-worker-number", "tpu-env")
_ACTIONS = ("abandoning", "creating", "creatingWithoutRetries", "deleting", "none",
            "recreating", "refreshing", "restarting", "resuming", "starting", "stopping",
            "suspending", "verifying")  # fmt: skip
_SUFFIX = string.ascii_lowercase + string.digits


_MEMBER_STATE = ("created", "ran", "lost", "recreating", "pending_recreate", "removing")


class Member:
    """One VM the group wants: its name and worker id, and how its last creation went."""

    def __init__(self, name: str, worker_id: int) -> None:
        self.name = name
        self.worker_id = worker_id
        self.created = False  # a creation was ever asked for
        self.insert_op: str | None = None  # the key of its latest insert operation
        self.ran = False  # the current incarnation reached RUNNING
        self.errors: list[dict[str, Any]] | None = None  # lastAttempt.errors.errors
        self.retry_at: float | None = None
        self.lost = False  # gone and left so (DO_NOTHING, "leave")
        self.recreating = False  # being created again by the group (until RUNNING)
        self.pending_recreate = False  # deleted by the group, created again once gone
        self.removing = False  # resized away: deleted, then forgotten


class Mig:
    """A zonal (`zones/z`) or regional (`regions/r`) managed instance group."""

    def __init__(
        self,
        *,
        project: str,
        scope: str,
        zone: str,
        body: dict[str, Any],
        template: Template,
        policy: Policy | None,
        uid: int,
        now: float,
    ) -> None:
        self.project, self.scope, self.zone, self.body = project, scope, zone, body
        self.name: str = body["name"]
        self.template, self.policy, self.uid, self.create_time = template, policy, uid, now
        self.target_size = int(body.get("targetSize", 0))
        mode = (body.get("targetSizePolicy") or {}).get("mode", "INDIVIDUAL")
        self.bulk = mode == "BULK"
        lifecycle = body.get("instanceLifecyclePolicy") or {}
        self.on_failure: str = lifecycle.get("defaultActionOnFailure", "REPAIR")
        self.members: list[Member] = []
        self.bulk_waiting = self.bulk and self.target_size > 0
        self.bulk_check: tuple[float, OpError | None] | None = None
        self.deleting = False
        self.delete_op: str | None = None
        self.timer_at: float | None = None
        self.next_number = 0  # how many sequential names were handed out

    @property
    def machine(self) -> MachineType:
        return self.template.machine

    @property
    def key(self) -> str:
        return f"projects/{self.project}/{self.scope}/instanceGroupManagers/{self.name}"

    @property
    def self_link(self) -> str:
        return f"{API}/{self.key}"

    def member_key(self, member: Member) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{member.name}"

    def action(self, member: Member, inst: Instance | None) -> str:
        """The member's `currentAction`."""
        if self.deleting or member.removing:
            return "DELETING"
        if inst is None:
            return "NONE" if member.lost else "RECREATING" if member.recreating else "CREATING"
        if inst.status in CREATING or inst.status == "PENDING":  # PENDING: flex-start waiting
            return "RECREATING" if member.recreating else "CREATING"
        if inst.status == "STOPPING" and inst.delete_op is not None:
            return "RECREATING" if member.recreating else "DELETING"
        return "NONE"

    def managed_instance(self, member: Member, inst: Instance | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "instance": f"{API}/{self.member_key(member)}",
            "name": member.name,
            "currentAction": self.action(member, inst),
            "targetStatus": "RUNNING",
            "version": {"instanceTemplate": self.template.self_link},
        }
        if inst is not None:
            out["id"] = str(inst.uid)
            out["instanceStatus"] = inst.status
            if inst.run_ends_at is not None:  # ManagedInstanceScheduling, output only
                out["scheduling"] = {"terminationTimestamp": rfc3339(inst.run_ends_at)}
        if member.errors:
            out["lastAttempt"] = {"errors": {"errors": member.errors}}
        return out

    def to_json(self, instances: dict[str, Instance]) -> dict[str, Any]:
        pairs = [(m, instances.get(self.member_key(m))) for m in self.members]
        actions = dict.fromkeys(_ACTIONS, 0)
        statuses: dict[str, int] = {}
        for member, inst in pairs:
            action = self.action(member, inst)
            actions[_camel(action)] = actions.get(_camel(action), 0) + 1
            status = _camel(inst.status) if inst is not None else "nonExistent"
            statuses[status] = statuses.get(status, 0) + 1
        if self.bulk_waiting:
            actions["creating"] += self.target_size - len(self.members)
        stable = not self.bulk_waiting and all(a == "NONE" for a in map(self._act, pairs))
        bulk: dict[str, Any] = {"inProgress": self.bulk_waiting}
        if self.bulk_check is not None:
            when, error = self.bulk_check
            check: dict[str, Any] = {"timestamp": rfc3339(when)}
            if error is not None:
                check["error"] = error.fields()["error"]
            bulk["lastProgressCheck"] = check
        location = (
            {"zone": zone_url(self.project, self.zone)}
            if self.scope.startswith("zones/")
            else {"region": f"{API}/projects/{self.project}/{self.scope}"}
        )
        group = f"{API}/projects/{self.project}/{self.scope}/instanceGroups/{self.name}"
        out: dict[str, Any] = {
            "kind": "compute#instanceGroupManager",
            "id": str(self.uid),
            "creationTimestamp": rfc3339(self.create_time),
            "name": self.name,
            **location,
            "instanceTemplate": self.template.self_link,
            "versions": [{"instanceTemplate": self.template.self_link,
                          "targetSize": {"calculated": self.target_size}}],
            "instanceGroup": group,
            "baseInstanceName": self.body["baseInstanceName"],
            "currentActions": actions,
            "status": {"isStable": stable, "versionTarget": {"isReached": stable},
                       "bulkInstanceOperation": bulk, "currentInstanceStatuses": statuses},
            "targetSize": self.target_size,
            "targetSizePolicy": {"mode": "BULK" if self.bulk else "INDIVIDUAL"},
            "instanceLifecyclePolicy": {"defaultActionOnFailure": self.on_failure,
                                        "forceUpdateOnRepair": "NO"},
            "listManagedInstancesResults": "PAGELESS",
            "selfLink": self.self_link,
            # Google's MIGs carry one (optimistic locking of updates); a resize changes it.
            "fingerprint": _fingerprint_of(f"{self.uid}/{self.target_size}"),
        }  # fmt: skip
        for key in ("description", "distributionPolicy"):
            if self.body.get(key):
                out[key] = self.body[key]
        if self.policy is not None:
            out["resourcePolicies"] = {"workloadPolicy": self.policy.self_link}
        return out

    def _act(self, pair: tuple[Member, Instance | None]) -> str:
        return self.action(*pair)


def _camel(upper: str) -> str:
    first, *rest = upper.lower().split("_")
    return first + "".join(word.capitalize() for word in rest)


class Migs:
    """Every project's managed instance groups, and what they do on their own."""

    def __init__(self, book: ComputeBook, shared: Shared) -> None:
        self.book = book
        self.shared = shared
        self.state = book.state
        self.options = book.options
        self.migs: dict[str, Mig] = {}
        book.groups = self

    def reset(self) -> None:
        self.migs = {}
        self.shared.reset()

    # -----------------------------------------------------------------------------------------
    # The persisted snapshot (persistence.py, through the book): operations are not kept, so a
    # group being deleted goes on without its operation, and a failed member is tried again.

    def snapshot(self) -> dict[str, Any]:
        migs = [
            {"project": m.project, "scope": m.scope, "zone": m.zone, "body": m.body,
             "template": m.template.key, "policy": m.policy.key if m.policy else None,
             "uid": m.uid, "create_time": m.create_time, "target_size": m.target_size,
             "bulk_waiting": m.bulk_waiting, "deleting": m.deleting,
             "next_number": m.next_number,
             "members": [[x.name, x.worker_id, *(getattr(x, k) for k in _MEMBER_STATE)]
                         for x in m.members]}
            for m in self.migs.values()
        ]  # fmt: skip
        return {**self.shared.snapshot(), "migs": migs}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.shared.restore(snapshot)
        for raw in snapshot.get("migs", []):
            policy = self.shared.policies.get(raw["policy"]) if raw["policy"] else None
            template = self.shared.templates[raw["template"]]
            mig = Mig(project=raw["project"], scope=raw["scope"], zone=raw["zone"],
                      body=raw["body"], template=template, policy=policy, uid=int(raw["uid"]),
                      now=float(raw["create_time"]))  # fmt: skip
            mig.target_size, mig.bulk_waiting = int(raw["target_size"]), bool(raw["bulk_waiting"])
            mig.deleting, mig.next_number = bool(raw["deleting"]), int(raw["next_number"])
            for name, worker_id, *flags in raw["members"]:
                member = Member(str(name), int(worker_id))
                for key, value in zip(_MEMBER_STATE, flags, strict=True):
                    setattr(member, key, bool(value))
                mig.members.append(member)
                inst = self.book.instances.get(mig.member_key(member))
                if inst is not None:
                    inst.group = mig.key
            self.migs[mig.key] = mig
            for used in (mig.template.key, policy.key if policy else None):
                if used is not None:
                    self.shared.users.setdefault(used, set()).add(mig.key)
            self.poke(mig, 0.0)

    # -----------------------------------------------------------------------------------------
    # Members: names, worker ids, bodies.

    def add_members(self, mig: Mig, count: int) -> None:
        """`count` more members, with the next names and the worker ids not yet taken."""
        base = mig.body["baseInstanceName"]
        taken = {m.worker_id for m in mig.members if not m.removing}
        free = [i for i in range(len(taken) + count) if i not in taken][:count]
        if self.options.compute_mig_worker_order == "shuffled":
            random.Random(self.book.uid()).shuffle(free)
        names = {m.name for m in mig.members}
        for worker_id in free:
            name = self._name(mig, base, names)
            names.add(name)
            mig.members.append(Member(name, worker_id))
        mig.members.sort(key=lambda m: m.name)

    def _name(self, mig: Mig, base: str, taken: set[str]) -> str:
        """`x-w-###` -> x-w-001, x-w-002... (`###[N]` starts at N); else a random suffix."""
        if "#" in base:
            stem, _, rest = base.partition("#")
            width = 1 + len(rest) - len(rest.lstrip("#"))
            start = int(rest.lstrip("#").strip("[]") or 1)
            while True:
                name = f"{stem}{start + mig.next_number:0{width}d}"
                mig.next_number += 1
                if name not in taken:
                    return name
        rng = random.Random(self.book.uid())
        while True:
            suffix = "".join(rng.choice(_SUFFIX) for _ in range(4))
            if f"{base}-{suffix}" not in taken:
                return f"{base}-{suffix}"

    def member_spec(self, mig: Mig, member: Member) -> dict[str, Any]:
        """The template's properties as an instance body of this member (COMMON design)."""
        spec = copy.deepcopy(mig.template.properties)
        spec["name"] = member.name
        spec["machineType"] = f"zones/{mig.zone}/machineTypes/{mig.machine.name}"
        metadata = dict(spec.get("metadata") or {})
        items = [i for i in metadata.get("items") or [] if i.get("key") not in _WORKER_KEYS]
        # Google writes the project's number here, not its id (emulator/projects.py).
        creator = (
            f"projects/{project_number(mig.project)}/{mig.scope}/instanceGroupManagers/{mig.name}"
        )
        items.append({"key": "created-by", "value": creator})
        source = self.options.compute_worker_id_source
        if source in ("both", "agent-worker-number"):
            items.append({"key": "agent-worker-number", "value": str(member.worker_id)})
        if source in ("both", "tpu-env"):
            topology = mig.policy.topology if mig.policy is not None else None
            env = (
                f"ACCELERATOR_TYPE: '{mig.machine.name}'\n"
                f"TOPOLOGY: '{topology or ''}'\nWORKER_ID: '{member.worker_id}'\n"
            )
            items.append({"key": "tpu-env", "value": env})
        metadata["items"] = items
        spec["metadata"] = metadata
        return spec

    def _create(self, mig: Mig, member: Member) -> None:
        if mig.member_key(member) in self.book.instances:
            # An instance of that name exists (not the group's): try again later.
            self.poke(mig, self.options.compute_mig_retry_seconds)
            return
        spec = self.member_spec(mig, member)
        op = self.book.create_instance(mig.project, mig.zone, spec, mig.machine, group=mig.key)
        member.created, member.ran, member.lost, member.retry_at = True, False, False, None
        member.pending_recreate = False
        member.insert_op = op.key

    # -----------------------------------------------------------------------------------------
    # Timers and reconciliation.

    def poke(self, mig: Mig, delay: float) -> None:
        """Reconcile `mig` in `delay` seconds, unless it already will sooner."""
        due = self.book.now() + delay
        if mig.timer_at is not None and mig.timer_at <= due:
            return
        mig.timer_at = due
        self.state.schedule(delay, "vm_tick", f"mig|{mig.key}", 0)

    def member_changed(self, inst: Instance) -> None:
        mig = self.migs.get(inst.group or "")
        if mig is not None:
            self.poke(mig, 0.0)

    def tick(self, key: str, now: float) -> None:
        mig = self.migs.get(key)
        if mig is None:
            return
        if mig.timer_at is not None and mig.timer_at <= now + 1e-9:
            mig.timer_at = None
        self.reconcile(mig, now)

    def reconcile(self, mig: Mig, now: float) -> None:
        if mig.deleting:
            self._reconcile_delete(mig)
            return
        if mig.bulk_waiting:
            self._bulk(mig, now)
            return
        for member in list(mig.members):
            self._reconcile_member(mig, member, now)

    def repairs(self, mig: Mig) -> bool:
        return (
            mig.on_failure == "REPAIR"
            or self.options.compute_mig_on_member_loss == "recreate_member"
        )

    def _reconcile_member(self, mig: Mig, member: Member, now: float) -> None:
        book = self.book
        inst = book.instances.get(mig.member_key(member))
        if member.removing:
            if inst is None:
                mig.members.remove(member)
            else:
                book.delete_instance(inst)
            return
        if inst is not None:
            if inst.status == "RUNNING":
                member.ran, member.errors, member.recreating = True, None, False
            elif inst.status == "TERMINATED" and self.repairs(mig):
                member.recreating = member.pending_recreate = True
                book.delete_instance(inst)
            return
        if not member.created or member.pending_recreate:
            self._create(mig, member)
            return
        op = book.ops.get(member.insert_op or "")
        if op is not None and op.error is not None and not member.ran:
            # The last attempt failed: it shows, and the group tries again later.
            member.errors = [op.error.fields()["error"]["errors"][0]]
            if member.retry_at is None:
                member.retry_at = now + self.options.compute_mig_retry_seconds
            if now >= member.retry_at - 1e-9:
                self._create(mig, member)
            else:
                self.poke(mig, member.retry_at - now)
            return
        if member.lost:
            return
        if self.repairs(mig):
            member.recreating = True
            self._create(mig, member)
        else:
            member.lost = True

    def _bulk(self, mig: Mig, now: float) -> None:
        """All at once, or nothing yet (research section 6.3)."""
        error = self._bulk_error(mig)
        mig.bulk_check = (now, error)
        if error is not None:
            self.poke(mig, self.options.compute_mig_retry_seconds)
            return
        mig.bulk_waiting = False
        self.add_members(mig, mig.target_size - len([m for m in mig.members if not m.removing]))
        for member in mig.members:
            if not member.removing:
                self._create(mig, member)

    def _bulk_error(self, mig: Mig) -> OpError | None:
        book, machine, count = self.book, mig.machine, mig.target_size
        region = mig.zone.rsplit("-", 1)[0]
        limit = book.quota.get((region, machine.family))
        used = book.quota_used(region, machine.family) + count * machine.chips
        if limit is not None and used > limit:
            metric = f"{machine.family.upper()}_CHIPS"
            message = f"Quota '{metric}' exceeded.  Limit: {float(limit)} in region {region}."
            return OpError("QUOTA_EXCEEDED", message, 403)
        if not self.state.has_capacity(mig.zone, machine.name, count):
            return book.stockout(mig.project, mig.zone, machine)
        return None

    # -----------------------------------------------------------------------------------------
    # Deletion.

    def start_delete(self, mig: Mig, op: ZoneOperation) -> None:
        mig.deleting, mig.delete_op, mig.bulk_waiting = True, op.key, False
        self._reconcile_delete(mig)

    def _reconcile_delete(self, mig: Mig) -> None:
        alive = [
            inst
            for inst in (self.book.instances.get(mig.member_key(m)) for m in mig.members)
            if inst is not None
        ]
        for inst in alive:
            self.book.delete_instance(inst)  # the running delete, if one is
        if alive:
            return
        del self.migs[mig.key]
        for key in (mig.template.key, mig.policy.key if mig.policy else None):
            if key is not None:
                self.shared.users.get(key, set()).discard(mig.key)
        op = self.book.ops.get(mig.delete_op or "")
        if op is not None:
            op.finish(self.book.now())
