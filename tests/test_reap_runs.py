"""scripts/reap_runs.py against a real Prefect server: only runs of the given work pool whose submitting
worker stopped sending heartbeats are marked Crashed; healthy workers' runs, other pools' runs and runs
outside any pool are left alone."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
import uuid
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.events import Event
from prefect.events.filters import EventFilter, EventNameFilter
from prefect.states import Running

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "reap_runs.py"
spec = importlib.util.spec_from_file_location("reap_runs", SCRIPT)
reap_runs = importlib.util.module_from_spec(spec)
sys.modules["reap_runs"] = reap_runs  # dataclasses look their module up
spec.loader.exec_module(reap_runs)


async def submitted(client, worker: str, run_id) -> None:
    """What a worker records when it submits a run (prefect.worker.submitted-flow-run)."""
    event = Event(
        event=reap_runs.SUBMITTED,
        resource={"prefect.resource.id": f"prefect.worker.process.{worker}", "prefect.resource.name": worker},
        related=[{"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"}],
    )
    response = await client._client.post("/events", json=[event.model_dump(mode="json")])
    response.raise_for_status()


async def scenario() -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    pool_a, pool_b = f"reap-a-{tag}", f"reap-b-{tag}"
    async with get_client() as client:
        for pool in (pool_a, pool_b):
            await client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        flow_id = await client.create_flow_from_name(f"reap-test-{tag}")
        dep_a = await client.create_deployment(flow_id=flow_id, name="a", work_pool_name=pool_a)
        dep_b = await client.create_deployment(flow_id=flow_id, name="b", work_pool_name=pool_b)
        # a worker that stopped: its last heartbeat is older than three of its 1 s intervals
        await client.send_worker_heartbeat(pool_a, "dead-worker", heartbeat_interval_seconds=1)
        await client.send_worker_heartbeat(pool_b, "dead-b", heartbeat_interval_seconds=1)
        runs = {
            "dead worker": await client.create_flow_run_from_deployment(dep_a),
            "healthy worker": await client.create_flow_run_from_deployment(dep_a),
            "unknown worker": await client.create_flow_run_from_deployment(dep_a),
            "other pool": await client.create_flow_run_from_deployment(dep_b),
        }
        for run in runs.values():
            await client.set_flow_run_state(run.id, Running(), force=True)
        for name, worker in (("dead worker", "dead-worker"), ("healthy worker", "healthy-worker"), ("other pool", "dead-b")):
            await submitted(client, worker, runs[name].id)
        deadline = time.monotonic() + 60
        while True:  # events are stored by the server's pipeline, a moment later
            page = await client.read_events(EventFilter(event=EventNameFilter(name=[reap_runs.SUBMITTED])), limit=50)
            if {str(r.id) for r in runs.values()} - {str(runs["unknown worker"].id)} <= {
                    rel.id.removeprefix("prefect.flow-run.") for e in page.events for rel in e.related}:
                break
            assert time.monotonic() < deadline, "the submission events never reached the server"
            await asyncio.sleep(0.5)
        await asyncio.sleep(max(0.0, 3.5))  # dead-worker's heartbeat ages past 3 × 1 s
        await client.send_worker_heartbeat(pool_a, "healthy-worker", heartbeat_interval_seconds=30)
        verdicts = await reap_runs.reap([pool_a])
        assert {v.run.id for v in verdicts} == {runs[k].id for k in ("dead worker", "healthy worker", "unknown worker")}
        states = {name: (await client.read_flow_run(run.id)).state for name, run in runs.items()}
        dead_why = next(v.why for v in verdicts if v.run.id == runs["dead worker"].id)
        return {name: state.type.value for name, state in states.items()} | {"why": dead_why,
                "message": states["dead worker"].message}


@pytest.mark.slow  # a Prefect server
def test_only_runs_of_a_dead_worker_on_this_pool_are_crashed():
    states = asyncio.run(scenario())
    assert states["dead worker"] == "CRASHED"
    assert states["healthy worker"] == "RUNNING"
    assert states["unknown worker"] == "RUNNING"  # a worker of the pool is alive: it may be running it
    assert states["other pool"] == "RUNNING"
    assert states["why"] == "its worker 'dead-worker' sends no heartbeats any more"
    assert "Retry resumes it" in states["message"]
