"""Mark flow runs that no process is running any more as Crashed, so they release their deployment's
concurrency slot and a Retry from the UI resumes them. scripts/up.sh calls it before it starts a worker.

Only runs of the given work pool(s) are touched, and of those only the ones whose worker is gone:
Running / Pending / Cancelling runs whose submitting worker (Prefect records a
`prefect.worker.submitted-flow-run` event naming it) has sent no heartbeat for three of its heartbeat
intervals. Runs of healthy workers, of other pools, and runs outside any pool (`rft run`) are left alone.
A run whose worker is unknown (its submission event has expired) is reaped only when no worker of the
pool is alive at all.

    python scripts/reap_runs.py --pool rft [--pool other] [--dry-run]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
    WorkPoolFilter,
    WorkPoolFilterName,
)
from prefect.client.schemas.objects import StateType
from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter, EventRelatedFilter
from prefect.states import Crashed

ORPHANED = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING]
SUBMITTED = "prefect.worker.submitted-flow-run"
MISSED_HEARTBEATS = 3  # Prefect's own rule for calling a worker offline
DEFAULT_HEARTBEAT_S = 30


@dataclass
class Verdict:
    run: Any
    worker: str | None  # the worker that submitted it, when Prefect still knows
    reap: bool
    why: str


def alive(worker: Any, now: datetime.datetime) -> bool:
    """A worker is alive while its last heartbeat is younger than three heartbeat intervals."""
    if worker.last_heartbeat_time is None:
        return False
    interval = worker.heartbeat_interval_seconds or DEFAULT_HEARTBEAT_S
    return now - worker.last_heartbeat_time < datetime.timedelta(seconds=MISSED_HEARTBEATS * interval)


async def submitting_worker(client: Any, run_id: Any) -> str | None:
    """The name of the worker that submitted flow run `run_id` (its latest submission), if recorded."""
    page = await client.read_events(
        EventFilter(
            occurred=EventOccurredFilter(since=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)),
            event=EventNameFilter(name=[SUBMITTED]),
            related=EventRelatedFilter(id=[f"prefect.flow-run.{run_id}"]),
        ),
        limit=10,
    )
    events = sorted(page.events, key=lambda e: e.occurred, reverse=True)
    return events[0].resource.get("prefect.resource.name") if events else None


async def judge(client: Any, pool: str, now: datetime.datetime | None = None) -> list[Verdict]:
    """Every unfinished run of `pool`, and whether it is orphaned."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    workers = await client.read_workers_for_work_pool(pool)
    living = {w.name for w in workers if alive(w, now)}
    runs = await client.read_flow_runs(
        flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=ORPHANED))),
        work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])),
    )
    verdicts = []
    for run in runs:
        worker = await submitting_worker(client, run.id)
        if worker is not None:
            gone = worker not in living
            why = f"its worker {worker!r} " + ("sends no heartbeats any more" if gone else "is alive")
        else:
            gone = not living
            why = "no worker of the pool is alive" if gone else f"workers of the pool are alive ({', '.join(sorted(living))})"
        verdicts.append(Verdict(run, worker, gone, why))
    return verdicts


async def reap(pools: list[str], dry_run: bool = False) -> list[Verdict]:
    """Mark the orphaned runs of `pools` Crashed; returns what was judged."""
    async with get_client() as client:
        verdicts = [v for pool in pools for v in await judge(client, pool)]
        for v in verdicts:
            if not v.reap:
                continue
            if not dry_run:
                message = f"orphaned: {v.why} (found by scripts/reap_runs.py); Retry resumes it"
                await client.set_flow_run_state(v.run.id, Crashed(message=message), force=True)
            print(f"flow run {v.run.name} ({v.run.id}) was orphaned ({v.why}): "
                  + ("would be marked Crashed" if dry_run else "marked Crashed"))
    return verdicts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", action="append", required=True, help="work pool whose orphaned runs to reap")
    parser.add_argument("--dry-run", action="store_true", help="only say what would be marked Crashed")
    args = parser.parse_args(argv)
    asyncio.run(reap(args.pool, args.dry_run))


if __name__ == "__main__":
    main()
