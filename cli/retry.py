"""`rft retry FLOW_RUN [--set path=value ...]`: run a deployment's flow run that ended (a budget stop, a failure)
again, with settings changed — e.g. a larger budget. The same flow run, so the same experiment (a nightly run is
named after its flow run): it resumes from its latest checkpoint. `prefect flow-run retry` does the same with
the parameters unchanged, so a budget stop retried that way stops again after one step."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from cli.validate import SetOption, err_console
from schemas import ConfigRuleError, ExperimentConfig, UnknownSettingError, describe_errors, parse_set_args

ENDED = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def retry(
    flow_run: Annotated[str, typer.Argument(help="The flow run's id (as `prefect deployment run` prints it).")],
    set_: SetOption = None,
) -> None:
    """Schedule an ended deployment run of the rft flow again, its `overrides` updated by --set; a worker runs it."""
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run)
        state = run.state.type.value if run.state else "PENDING"
        if run.deployment_id is None:
            fail(flow_run, "not a deployment's run: run the experiment again (rft run, same name) to resume it")
        if state not in ENDED:
            fail(flow_run, f"still {state}: retry it once it has ended")
        parameters = with_settings(flow_run, run.parameters or {}, set_ or [])
        client.update_flow_run(run.id, parameters=parameters)
        client.set_flow_run_state(run.id, Scheduled(message=f"rft retry: {', '.join(set_ or []) or 'unchanged'}"), force=True)
    typer.echo(f"{run.name} ({run.id}) is scheduled again with overrides {parameters['overrides']}: a worker of its "
               f"pool resumes it from its latest checkpoint. Follow it: rft watch {run.id}")


def with_settings(flow_run: str, parameters: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """The run's parameters with `settings` added to its overrides, validated as the rft flow will read them."""
    try:
        overrides = {**(parameters.get("overrides") or {}), **parse_set_args(settings)}
        ExperimentConfig.model_validate(parameters["config"]).with_overrides(overrides)
    except ValidationError as exc:
        fail(flow_run, *describe_errors(exc))
    except ConfigRuleError as exc:
        fail(flow_run, *[f"{p}: {m}" for p, m in exc.problems])
    except (UnknownSettingError, ValueError, TypeError, KeyError) as exc:
        fail(flow_run, str(exc))
    return {**parameters, "overrides": overrides}


def fail(flow_run: str, *lines: str) -> None:
    err_console.print(f"[bold red]{escape(flow_run)}[/]: " + "\n  ".join(escape(line) for line in lines))
    raise typer.Exit(1)
