"""Leader takeover (issue 15): the leader lost -> the first cloud action of the new leader.

`python -m bench.run --only takeover [--quick]` (or `python -m bench.takeover [--quick]
[--rounds N]`).

Method. One real PostgreSQL (tests/postgres_support.py: initdb and pg_ctl as an unprivileged
user on a free port, `fsync=off`), the emulator in this process (its own thread, a create
takes 2 s, a delete 1 s) and two real `python -m tpucared run` daemons on one database, one
fleet of 3 v4-8 spot slots. Per lease length (a database of its own), round after round:

1. Steady state: the 3 nodes READY in the cloud and in the store, one daemon holds an
   unexpired lease, the other answers `/healthz` with `ok: standby`; then a wait of a random
   fraction of `lease / 3` (the renewal period), so the loss falls anywhere in the cycle.
2. The leader is lost: `kill -9` (even rounds) or `SIGSTOP` (odd rounds), and at once one
   node is preempted through the emulator (the new leader's first action is its DELETE).
3. Measured, all on this machine's one clock (the database's `now()`, the emulator's request
   log and this process share it):
   - `taken`: loss -> the new epoch's `acquired_at` in the lease row (the database's clock);
   - `first_action`: loss -> the first create or delete request of the new leader in the
     emulator's request log;
   - `since_renewal`: the lost leader's last renewal -> `acquired_at` (what the rules bound:
     a standby attempts every `lease / 3`, so it takes at most `lease + lease / 3` after it).
   The theoretical bound of the first action after the loss is `lease + lease / 3 + poll`.
4. The preempted node is recreated (READY), then the lost daemon comes back as the new
   standby: a killed one is restarted with its config, a stopped one gets SIGCONT and stands
   down by itself.

Statistics are over the rounds (bench/common.py): quote the median.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common, daemon_config, detection

ROOT = Path(__file__).resolve().parents[1]
PROJECT = detection.PROJECT
ZONE = detection.ZONE
FLEET = "tko"
SIZE = 3
OWNER = "bench"
WAIT_S = 120.0


@dataclass(frozen=True)
class Settings:
    rounds: Mapping[float, int]  # lease (s) -> rounds
    poll: float = 2.0
    create_seconds: float = 2.0
    delete_seconds: float = 1.0
    seed: int = 20251125


FULL = Settings(rounds={15.0: 20, 3.0: 20})
QUICK = Settings(rounds={3.0: 2})


def postgres_support() -> Any:
    """tests/postgres_support.py (the tests' PostgreSQL server), imported from its directory."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import postgres_support

    return postgres_support


# ---------------------------------------------------------------------------------------------
# The two daemons


class Candidate:
    """One `tpucared run` candidate: its config (fixed HTTP port) and its current process."""

    def __init__(
        self, directory: Path, cloud: detection.Cloud, url: str, lease: float, poll: float
    ):
        directory.mkdir(parents=True, exist_ok=True)
        self.port = common.free_port()
        self.config = directory / "fleet.toml"
        config = daemon_config.against_emulator(
            cloud.url,
            daemon_config.fleet(FLEET, zones=[ZONE], size=SIZE, capacity="spot"),
            project=PROJECT,
            owner=OWNER,
            poll=f"{poll:g}s",
            daemon={"db": url, "lease": f"{lease:g}s", "http": f"127.0.0.1:{self.port}"},
        )
        daemon_config.write(self.config, config)
        self.log = (directory / "daemon.log").open("ab")
        self.process = common.start_daemon(self.config, self.log, cwd=ROOT)
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def restart(self) -> None:
        self.process.wait(30)
        self.process = common.start_daemon(self.config, self.log, cwd=ROOT)

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.process.pid, sig)
        self.stopped = sig == signal.SIGSTOP

    def healthz(self) -> str | None:
        try:
            url = f"http://127.0.0.1:{self.port}/healthz"
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode().strip())
        except (OSError, urllib.error.URLError):
            return None

    def close(self) -> None:
        if self.process.poll() is None:
            if self.stopped:
                os.kill(self.process.pid, signal.SIGCONT)
            common.stop_process(self.process, grace=30)
        self.log.close()


class Database:
    """The lease row and the nodes, read with psql (the superuser) on the test server."""

    def __init__(self, server: Any, name: str) -> None:
        self.server = server
        self.name = name

    def rows(self, sql: str) -> list[list[str]]:
        try:
            out = str(self.server.psql(sql, self.name))
        except Exception as exc:
            if "does not exist" in str(exc):
                return []  # still migrating
            raise
        return [line.split("|") for line in out.splitlines() if line]

    def lease(self) -> dict[str, Any] | None:
        """The lease row: epoch, holder pid, instants (epoch seconds, the database's clock)."""
        rows = self.rows(
            "SELECT epoch, holder_pid, extract(epoch FROM acquired_at), "
            "extract(epoch FROM renewed_at), extract(epoch FROM expires_at), "
            "extract(epoch FROM now()) FROM leader_lease"
        )
        if not rows or not rows[0][1]:
            return None
        epoch, pid, acquired, renewed, expires, now = rows[0]
        return {
            "epoch": int(epoch),
            "pid": int(pid),
            "acquired": float(acquired),
            "renewed": float(renewed),
            "expires": float(expires),
            "now": float(now),
        }

    def ready(self) -> bool:
        rows = self.rows(
            "SELECT phase FROM nodes WHERE phase IN "
            "('requested','creating','ready','dead','deleting')"
        )
        return len(rows) == SIZE and all(r[0] == "ready" for r in rows)


def wait(check: Callable[[], Any], what: str, within: float = WAIT_S) -> Any:
    """`check` every 0.2 s (psql is a process each time) until truthy; TimeoutError after."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"takeover benchmark: timed out after {within:g}s waiting for {what}"
            )
        time.sleep(0.2)


def cloud_ready(cloud: detection.Cloud) -> bool:
    nodes = {k: v for k, v in cloud.nodes(ZONE).items() if k.startswith(f"{FLEET}-")}
    return len(nodes) == SIZE and all(state == "READY" for state in nodes.values())


def mutations(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Creates and deletes of nodes (or queued resources) in a request log."""
    return [
        r
        for r in requests
        if r["method"] in ("POST", "DELETE") and str(r["path"]).startswith("/v2/")
    ]


# ---------------------------------------------------------------------------------------------
# The rounds


def steady(cloud: detection.Cloud, db: Database, pair: list[Candidate]) -> tuple[int, int]:
    """Wait for the warm steady state; (leader index, standby index)."""
    wait(lambda: cloud_ready(cloud) and db.ready(), f"{SIZE} nodes READY")

    def roles() -> tuple[int, int] | None:
        lease = db.lease()
        if lease is None or lease["expires"] <= lease["now"]:
            return None
        pids = [c.pid for c in pair]
        if lease["pid"] not in pids:
            return None
        leader = pids.index(lease["pid"])
        standby = 1 - leader
        if pair[standby].healthz() != "ok: standby" or pair[leader].healthz() != "ok":
            return None
        return leader, standby

    found: tuple[int, int] = wait(roles, "a leader and a standby")
    return found


def one_round(
    cloud: detection.Cloud,
    db: Database,
    pair: list[Candidate],
    *,
    lease_s: float,
    poll: float,
    index: int,
    rng: random.Random,
) -> dict[str, Any]:
    leader, standby = steady(cloud, db, pair)
    time.sleep(rng.uniform(0, lease_s / 3))
    before = db.lease()
    if before is None or before["pid"] != pair[leader].pid:
        raise RuntimeError(f"round {index}: the lease moved before the loss: {before}")
    how = signal.SIGKILL if index % 2 == 0 else signal.SIGSTOP
    lost_at = time.time()
    pair[leader].signal(how)
    node = f"{FLEET}-{index % SIZE}"
    preempted_at = cloud.preempt(node)
    old = db.lease()  # the lost leader's last renewal (nobody else renews it)
    if old is None or old["epoch"] != before["epoch"]:
        raise RuntimeError(f"round {index}: taken before the lost term was read: {old}")

    def taken() -> dict[str, Any] | None:
        row = db.lease()
        return row if row and row["epoch"] > before["epoch"] else None

    new = wait(taken, f"round {index}: the standby's take")
    if new["pid"] != pair[standby].pid:
        raise RuntimeError(f"round {index}: taken by pid {new['pid']}, not the standby")

    def acted() -> dict[str, Any] | None:
        calls = mutations(cloud.requests(lost_at))
        return min(calls, key=lambda r: float(r["time"])) if calls else None

    first = wait(acted, f"round {index}: the new leader's first cloud action")
    wait(lambda: cloud_ready(cloud) and db.ready(), f"round {index}: {node} recreated")
    if how == signal.SIGKILL:
        pair[leader].restart()
    else:
        pair[leader].signal(signal.SIGCONT)
    wait(lambda: pair[leader].healthz() == "ok: standby", f"round {index}: the new standby")
    bound = lease_s + lease_s / 3 + poll
    return {
        "round": index,
        "signal": how.name,
        "lease_s": lease_s,
        "poll_interval_s": poll,
        "lost_at": round(lost_at, 4),
        "preempt_after_loss": round(preempted_at - lost_at, 4),
        "loss_after_renewal": round(lost_at - old["renewed"], 4),
        "taken": round(new["acquired"] - lost_at, 4),
        "since_renewal": round(new["acquired"] - old["renewed"], 4),
        "first_action": round(float(first["time"]) - lost_at, 4),
        "take_to_action": round(float(first["time"]) - new["acquired"], 4),
        "first_action_call": f"{first['method']} {first['path']}",
        "bound": round(bound, 4),
        "epochs": [before["epoch"], new["epoch"]],
    }


def measure(
    settings: Settings,
    lease_s: float,
    rounds: int,
    server: Any,
    scratch: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    rng = random.Random(settings.seed + int(lease_s * 1000))
    name = server.create_database()
    db = Database(server, name)
    url = server.url(name).render_as_string(hide_password=False)
    samples: list[dict[str, Any]] = []
    options = detection.Settings(
        detection_samples={},
        create_seconds=settings.create_seconds,
        delete_seconds=settings.delete_seconds,
    )
    with detection.Cloud(options) as cloud:
        pair: list[Candidate] = []
        try:
            for i in range(2):
                where = scratch / f"lease-{lease_s:g}s" / f"d{i}"
                pair.append(Candidate(where, cloud, url, lease_s, settings.poll))
                if i == 0:  # the first leads from the start, the second stands by
                    wait(lambda: db.lease() is not None, "the first daemon's lease")
            for index in range(rounds):
                sample = one_round(
                    cloud, db, pair, lease_s=lease_s, poll=settings.poll, index=index, rng=rng
                )
                samples.append(sample)
                progress(
                    f"lease {lease_s:g}s round {index} ({sample['signal']}): taken "
                    f"{sample['taken']:.2f}s, first action {sample['first_action']:.2f}s "
                    f"({sample['first_action_call']}), bound {sample['bound']:g}s"
                )
        finally:
            for candidate in pair:
                candidate.close()
    server.drop_database(name)
    return {
        "lease_s": lease_s,
        "poll_interval_s": settings.poll,
        "renew_every_s": round(lease_s / 3, 4),
        "bound_s": round(lease_s + lease_s / 3 + settings.poll, 4),
        "rounds": rounds,
        "taken_s": common.summarize([s["taken"] for s in samples]),
        "first_action_s": common.summarize([s["first_action"] for s in samples]),
        "since_renewal_s": common.summarize([s["since_renewal"] for s in samples]),
        "take_to_action_s": common.summarize([s["take_to_action"] for s in samples]),
        "raw": samples,
    }


def run(
    quick: bool,
    *,
    rounds: int | None = None,
    scratch: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    settings = QUICK if quick else FULL
    say = progress or (lambda line: print(line, flush=True))
    support = postgres_support()
    server = support.PostgresServer()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tpucared-takeover-") as tmp:
        server.start()
        try:
            for lease_s, n in settings.rounds.items():
                where = scratch or Path(tmp)
                results.append(measure(settings, lease_s, rounds or n, server, where, say))
        finally:
            server.stop()
    return {
        "parameters": {
            "fleet_size": SIZE,
            "accelerator_type": "v4-8",
            "poll_interval_s": settings.poll,
            "leases_s": list(settings.rounds),
            "emulator_create_seconds": settings.create_seconds,
            "emulator_delete_seconds": settings.delete_seconds,
            "signals": "SIGKILL on even rounds, SIGSTOP on odd rounds",
            "seed": settings.seed,
        },
        "takeover": results,
    }


def render(result: Mapping[str, Any]) -> str:
    rows = []
    for r in result["takeover"]:
        for label, key in (
            ("loss -> lease taken", "taken_s"),
            ("loss -> first action", "first_action_s"),
            ("last renewal -> taken", "since_renewal_s"),
            ("taken -> first action", "take_to_action_s"),
        ):
            s = r[key]
            rows.append(
                [
                    f"{r['lease_s']:g}s",
                    f"{r['bound_s']:g}s",
                    label,
                    *common.summary_cells(s),
                ]
            )
    head = ["lease", "bound", "interval", "n", "median s", "p99 s", "min s", "max s"]
    poll = result["parameters"]["poll_interval_s"]
    return f"poll {poll:g}s; bound = lease + lease/3 + poll\n" + common.table(head, rows)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.takeover", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, help="rounds per lease (default: 20, quick 2)")
    parser.add_argument("--output-dir", type=Path, default=common.RESULTS_DIR)
    parser.add_argument("--keep", type=Path, help="keep the daemons' configs and logs here")
    args = parser.parse_args(argv)
    from bench import run as harness

    def measured(quick: bool) -> dict[str, Any]:
        return run(quick, rounds=args.rounds, scratch=args.keep)

    path, envelope = harness.run_one(
        "takeover", measured, quick=args.quick, output_dir=args.output_dir
    )
    print(render(envelope["result"]))
    print(f"written to {path}")
    print(json.dumps(envelope["result"]["parameters"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
