"""The promotion gate on the MLflow model registry: a new version takes an alias (`champion`) only if its
held-out metric beats the holder's by the margin. Both numbers and the decision go into the new version's
description; the value and the held-out set's fingerprint are tags of every gated version, so that the
next night compares like with like."""

from __future__ import annotations

from typing import Any

from mlflow.exceptions import MlflowException

from tracking.spool import TrackingClient

HELDOUT_TAG = "rft.gate.heldout"  # fingerprint of the held-out set and how it was evaluated


def value_tag(metric: str) -> str:
    return f"rft.gate.{metric}"


def promote(client: TrackingClient, run_id: str, name: str, metric: str, value: float, heldout: str,
            margin: float, alias: str) -> dict[str, Any]:
    """Decide whether run `run_id`'s version of registered model `name` takes `alias`; returns the decision."""
    decision: dict[str, Any] = {"model": name, "alias": alias, "metric": metric, "value": value, "margin": margin,
                                "version": None, "holder_version": None, "holder_value": None, "promoted": False}
    versions = client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    if not versions:
        decision["reason"] = f"this run registered no version of {name!r}: nothing to promote"
        return decision
    version = max(versions, key=lambda v: int(v.version)).version
    decision["version"] = version
    client.set_model_version_tag(name, version, value_tag(metric), repr(float(value)))
    client.set_model_version_tag(name, version, HELDOUT_TAG, heldout)
    holder = _holder(client, name, alias)
    if holder is None:
        decision |= {"promoted": True, "reason": f"no version held {alias!r} yet"}
    elif holder.version == version:  # the gate of a finished run, asked again (a re-run of the flow)
        decision |= {"promoted": True, "holder_version": version, "holder_value": value, "reason": f"it holds {alias!r} already"}
    else:
        decision["holder_version"] = holder.version
        held, held_on = holder.tags.get(value_tag(metric)), holder.tags.get(HELDOUT_TAG)
        if held is None or held_on != heldout:
            decision["reason"] = (f"version {holder.version} holds {alias!r} without a {metric} on this held-out set: it "
                                  f"stays (move the alias by hand to start over)")
        else:
            decision["holder_value"] = float(held)
            gain = value - float(held)
            decision["promoted"] = gain > 0 and gain >= margin
            decision["reason"] = (f"{metric} {value:.4f} vs {float(held):.4f} of version {holder.version}: "
                                  f"{gain:+.4f}, {'at least' if decision['promoted'] else 'less than'} the margin {margin}")
    if decision["promoted"]:
        client.set_registered_model_alias(name, alias, version)
    verdict = f"took {alias!r}" if decision["promoted"] else f"did not take {alias!r}"
    client.update_model_version(name, version, description=f"Promotion gate: {verdict}. {decision['reason']}.")
    return decision


def _holder(client: TrackingClient, name: str, alias: str) -> Any:
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException:  # RESOURCE_DOES_NOT_EXIST / INVALID_PARAMETER_VALUE: no version has it
        return None
