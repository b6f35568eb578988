"""Running the checks: which ones a config needs, each under its own deadline, all at once.

`plan(config)` lists the checks in the order they print (credentials, each project, each
fleet, the guard); `run_checks(config, tokens)` runs them concurrently (at most
`CONCURRENCY` at a time) and returns one `CheckResult` each. A check that raises a classified
`ApiError` it does not judge (a 5xx, a malformed answer) or outlives its deadline becomes a
WARN naming the call's failure: it costs only its own check. `tpucared check` (cli/check.py)
prints them; `tpucared run` logs the WARN and FAIL ones (`log_results`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import structlog

from tpucared.config import Config
from tpucared.config.apis import APIS
from tpucared.config.syntax import COMPUTE_API
from tpucared.core.model.specs import FleetSpec
from tpucared.gcp import ApiError, CredentialsError, RetryPolicy, TokenSource, load_token_source
from tpucared.preflight import checks, rules
from tpucared.preflight.checks import Context
from tpucared.preflight.client import PreflightClient
from tpucared.preflight.results import CheckResult, Status, fail, ok, warn

log = structlog.get_logger(__name__)

START_DEADLINE_S = 90.0  # `tpucared run`'s checks, all of them
CHECK_DEADLINE_S = 20.0  # one check, its calls and their retries included
CONCURRENCY = 16
# Few, short retries: a preflight reports a flaky API rather than waiting it out.
RETRY = RetryPolicy(max_attempts=2, base=0.2, cap=1.0, max_retry_after=2.0)

Check = tuple[str, Callable[[], Awaitable[CheckResult]]]


def plan(ctx: Context) -> list[Check]:
    """Every check the config needs, named, in print order."""
    config = ctx.config
    out: list[Check] = [("credentials", partial(checks.credentials, ctx))]
    for project in ctx.projects():
        out.append((f"project[{project}]", partial(checks.project, ctx, project)))
        for service in checks.services_needed(ctx, project):
            out.append(
                (f"api[{project}/{service}]", partial(checks.service, ctx, project, service))
            )
        out.append((f"permissions[{project}]", partial(checks.project_permissions, ctx, project)))
    for fleet in config.fleets:
        f = fleet.name
        if APIS[fleet.api].service is None:
            # A registered cloud that is not a Google API: nothing here knows how to ask it.
            out.append((f"cloud[{f}]", partial(_sync, partial(_unchecked, fleet), ctx)))
            continue
        for zone in fleet.zones:
            out.append((f"type[{f}/{zone}]", partial(checks.offered, ctx, fleet, zone)))
        if fleet.api == COMPUTE_API:
            out.append((f"image[{f}]", partial(checks.image, ctx, fleet)))
        else:
            for zone in fleet.zones:
                check = partial(checks.runtime_version, ctx, fleet, zone)
                out.append((f"runtime_version[{f}/{zone}]", check))
        out.append((f"network[{f}]", partial(checks.network, ctx, fleet)))
        if fleet.node.subnetwork:
            for path in rules.subnetwork_paths(fleet.node.subnetwork, fleet, ctx.project(fleet)):
                name = f"subnetwork[{f}/{rules.short(path)}]"
                out.append((name, partial(checks.subnetwork, ctx, fleet, path)))
        out.append((f"service_account[{f}]", partial(checks.service_account, ctx, fleet)))
        if fleet.node.reservation:
            check = partial(checks.reservation, ctx, fleet, fleet.node.reservation)
            out.append((f"reservation[{f}]", check))
        for disk in fleet.node.data_disks:
            name = f"data_disk[{f}/{rules.short(disk.source)}]"
            out.append((name, partial(checks.data_disk, ctx, fleet, disk.source)))
        for region in rules.regions_of(fleet):
            out.append((f"quota[{f}/{region}]", partial(checks.quota, ctx, fleet, region)))
    out.append(("guard", partial(_sync, checks.guard, ctx)))
    return out


def _unchecked(fleet: FleetSpec, ctx: Context) -> CheckResult:
    return ok(
        f"cloud[{fleet.name}]",
        f'api = "{fleet.api}" ({APIS[fleet.api].title}) is no Google API: '
        "nothing of its cloud is checked before it runs",
    )


async def _sync(fn: Callable[[Context], CheckResult], ctx: Context) -> CheckResult:
    return fn(ctx)


async def _one(
    name: str, check: Callable[[], Awaitable[CheckResult]], deadline: float, gate: asyncio.Semaphore
) -> CheckResult:
    async with gate:
        try:
            async with asyncio.timeout(deadline):
                return await check()
        except TimeoutError:
            return warn(
                name,
                f"no answer within {deadline:g} s: not checked",
                "run `tpucared check` again; if it persists, check the network",
            )
        except ApiError as exc:
            said = " ".join(str(exc.message or exc).split())[:300]
            return warn(
                name,
                f"the call failed ({exc.kind.value}): {said}: not checked",
                "run `tpucared check` again",
            )
        except Exception as exc:  # a bug in one check must not cost the others theirs
            log.exception("check.crashed", check=name)
            said = " ".join(str(exc).split())[:300]
            return warn(
                name,
                f"the check broke ({type(exc).__name__}: {said}): not checked",
                "a bug: please report it with this line",
            )


async def run_checks(
    config: Config,
    tokens: TokenSource,
    *,
    deadline: float = CHECK_DEADLINE_S,
    client: PreflightClient | None = None,
) -> list[CheckResult]:
    """Every check of `config`, asked with `tokens` (closed by the caller). Never raises
    for a cloud failure: each is its check's result."""
    own = client is None
    if client is None:
        client = PreflightClient(
            config.gcp.endpoint,
            token_source=tokens,
            retry=RETRY,
            timeout=deadline / 2,  # a retry fits in the check's deadline
        )
    ctx = Context(config, client, tokens)
    gate = asyncio.Semaphore(CONCURRENCY)
    try:
        return list(
            await asyncio.gather(*(_one(name, check, deadline, gate) for name, check in plan(ctx)))
        )
    finally:
        ctx.close()
        if own:
            await client.close_session()


async def check_config(config: Config, *, deadline: float = CHECK_DEADLINE_S) -> list[CheckResult]:
    """`tpucared check`: the config's own credentials, then every check. Credentials that
    cannot be loaded (a missing key file, no ADC) are the one FAIL: nothing else can be asked."""
    try:
        tokens = await asyncio.to_thread(load_token_source, config.gcp.credentials)
    except CredentialsError as exc:
        return [
            fail(
                "credentials",
                str(exc),
                "`gcloud auth application-default login`, or "
                "gcp.credentials = a service account key file",
            )
        ]
    try:
        return await run_checks(config, tokens, deadline=deadline)
    finally:
        await tokens.aclose()


def log_results(results: Sequence[CheckResult]) -> None:
    """`tpucared run`'s start checks: one event per WARN and FAIL, one summary."""
    for r in results:
        if r.status is Status.FAIL:
            log.warning("check.failed", check=r.name, detail=r.detail, fix=r.fix)
        elif r.status is Status.WARN:
            log.info("check.warned", check=r.name, detail=r.detail, fix=r.fix)
    log.info(
        "check.finished",
        checks=len(results),
        failed=sum(r.status is Status.FAIL for r in results),
        warned=sum(r.status is Status.WARN for r in results),
    )


def start_checks(config: Config, tokens: TokenSource) -> Callable[[], Awaitable[None]]:
    """`tpucared run`'s checks: started now in the background (never delaying a tick, bounded
    by START_DEADLINE_S), their WARNs and FAILs logged; nothing refuses to start on them. The
    daemon's tokens are shared, not closed. Returns the stop to call at shutdown."""

    async def checked() -> None:
        try:
            async with asyncio.timeout(START_DEADLINE_S):
                results = await run_checks(config, tokens)
        except TimeoutError:
            log.warning("check.timed_out", seconds=START_DEADLINE_S)
            return
        log_results(results)

    task = asyncio.create_task(checked(), name="start-checks")

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return stop
