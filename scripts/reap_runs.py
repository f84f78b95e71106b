"""Mark flow runs that no process is running any more (Running/Pending/Cancelling while no worker is
up, e.g. after a reboot or a killed worker) as Crashed: they release their deployment's concurrency
slot, and a Retry from the UI resumes them. scripts/up.sh calls it before it starts the worker."""

from __future__ import annotations

import asyncio

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
from prefect.client.schemas.objects import StateType
from prefect.states import Crashed

ORPHANED = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING]


async def reap() -> None:
    async with get_client() as client:
        state = FlowRunFilterState(type=FlowRunFilterStateType(any_=ORPHANED))
        for run in await client.read_flow_runs(flow_run_filter=FlowRunFilter(state=state)):
            message = "no worker was running it (found by scripts/up.sh); Retry resumes it"
            await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            print(f"flow run {run.name} ({run.id}) was orphaned: marked Crashed")


if __name__ == "__main__":
    asyncio.run(reap())
