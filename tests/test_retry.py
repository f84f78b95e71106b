"""`rft retry`: a deployment's run that a budget stopped is scheduled again, the same flow run (so the same
experiment, which resumes from its checkpoint: tests/test_budget.py) with a larger budget; a bad setting changes
nothing. Real Prefect API (the tests' temporary server); no worker runs it."""

from __future__ import annotations

from typer.testing import CliRunner

from cli.main import app
from deployments import load_recipe


def test_a_budget_stop_is_scheduled_again_with_a_larger_budget() -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Completed

    nightly = load_recipe("smoke")
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("rft")
        deployment_id = client.create_deployment(flow_id=flow_id, name="retry-test")
        run = client.create_flow_run_from_deployment(deployment_id, name="nightly-fox", parameters={
            "config": nightly.user_data(), "overrides": {"budget.max_tokens": 1}, "name_per_flow_run": True})
        client.set_flow_run_state(run.id, Completed(name="BudgetReached", message="token budget reached"), force=True)

        bad = CliRunner().invoke(app, ["retry", str(run.id), "--set", "budget.max_tokens=-5"])
        assert bad.exit_code == 1 and "budget.max_tokens" in bad.output, bad.output
        unchanged = client.read_flow_run(run.id)
        assert unchanged.state.name == "BudgetReached" and unchanged.parameters["overrides"] == {"budget.max_tokens": 1}

        ok = CliRunner().invoke(app, ["retry", str(run.id), "--set", "budget.max_tokens=1000000"])
        assert ok.exit_code == 0, ok.output
        again = client.read_flow_run(run.id)
        assert again.state.type.value == "SCHEDULED" and again.name == "nightly-fox"  # the same experiment's name
        assert again.parameters["overrides"] == {"budget.max_tokens": 1000000}
        assert again.parameters["config"] == nightly.user_data() and again.parameters["name_per_flow_run"] is True

        running = CliRunner().invoke(app, ["retry", str(run.id)])
        assert running.exit_code == 1 and "still SCHEDULED" in running.output
