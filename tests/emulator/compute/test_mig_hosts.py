"""Every RUNNING member of a MIG is a simulated worker host, as a single instance is: SSH at its
networkIP with the template's `ssh-keys`, and a metadata server that gives its TPU worker id
(`agent-worker-number`, `tpu-env`'s WORKER_ID) and `created-by`; a preemption notice on one
member (control `:preempt`) shows on that member's metadata server only."""

from __future__ import annotations

from typing import Any

import asyncssh
from compute_support import FAST_RETRY, METADATA, USER, P, Z, call
from google.cloud import compute_v1
from mig_support import all_running, make_mig, make_policy, official, template_body
from mig_support import insert as insert_op

from bench.common import free_port
from tpucared.ssh import (
    Target,
    WorkerResult,
    host_keys_from_guest_attributes,
    run_on_all,
    ssh_keys_metadata_entry,
)

ZONE = f"/compute/v1/projects/{P}/zones/{Z}"


async def run(target: Target, command: str, key: asyncssh.SSHKey) -> WorkerResult:
    [result] = await run_on_all([target], command, key=key, retry=FAST_RETRY, connect_timeout=5.0)
    return result


async def test_members_are_ssh_hosts_with_their_worker_ids(tmp_path: Any) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    options = {"ssh_hosts": True, "ssh_port": free_port("0.0.0.0"),
               "hosts_dir": str(tmp_path / "hosts")}  # fmt: skip
    async with official(**options) as c:
        await make_policy(c, name="wp-2", topology="2x2x2")
        template = template_body()
        template["properties"]["metadata"]["items"].append(
            {"key": "ssh-keys", "value": ssh_keys_metadata_entry(USER, key)}
        )
        await insert_op(c.templates.insert, compute_v1.InstanceTemplate,
                        "instance_template_resource", project=P, body=template)  # fmt: skip
        await make_mig(c, policy="wp-2", size=2)
        await all_running(c, 2)
        targets = []
        for worker, name in enumerate(["iron-0-w-001", "iron-0-w-002"]):
            vm = await c.http.ok("GET", f"{ZONE}/instances/{name}")
            attributes = await c.http.ok(
                "GET", f"{ZONE}/instances/{name}/getGuestAttributes", queryPath="hostkeys/"
            )
            pairs = [(i["key"], i["value"]) for i in attributes["queryValue"]["items"]]
            targets.append(Target(worker=worker, host=vm["networkInterfaces"][0]["networkIP"],
                                  port=c.server.options.ssh_port, user=USER,
                                  pinned_host_keys=host_keys_from_guest_attributes(pairs),
                                  incarnation=vm["id"]))  # fmt: skip
        for worker, target in enumerate(targets):
            number = await run(target, METADATA + "attributes/agent-worker-number", key)
            assert number.ok, number
            assert number.stdout_tail.strip() == str(worker)
            env = await run(target, METADATA + "attributes/tpu-env", key)
            assert f"WORKER_ID: '{worker}'" in env.stdout_tail
            assert "TOPOLOGY: '2x2x2'" in env.stdout_tail
            creator = await run(target, METADATA + "attributes/created-by", key)
            assert creator.stdout_tail.strip().endswith("/instanceGroupManagers/iron-0")
        control = f"/_emulator/v1/projects/{P}/zones/{Z}/instances"
        await c.http.ok("POST", f"{control}/iron-0-w-002:preempt", {"notice_seconds": 5.0})
        notice = await run(targets[1], METADATA + "preempted", key)
        assert notice.stdout_tail.strip() == "TRUE"
        calm = await run(targets[0], METADATA + "preempted", key)
        assert calm.stdout_tail.strip() == "FALSE"
        vm = await call(c.instances.get, project=P, zone=Z, instance="iron-0-w-002")
        assert vm.status == "RUNNING"  # the notice comes first
