"""The layers' imports, read from the code by grimp: tasks and flows talk to a policy (never to Ray,
vLLM actors or a trainer class), backends never reach up into tracking, the pre-flight, tasks or flows,
tracking sits below the pre-flight and both below the tasks, and no two backend modules import each
other (directly or through others)."""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("backends", "tasks", "flows", "workflows", "buffer", "checkpointing", "schemas", "algorithms", "deployments", "cli",
            "tracking", "preflight")
# What only a policy may touch: the Ray runtime, the local actors, the Tinker clients and SDK, and the
# trainer implementations.
POLICY_INTERNALS = ("ray", "vllm", "tinker", "backends.local", "backends.tinker", "backends.torch_trainer", "backends.registry")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=True)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_tasks_and_flows_talk_to_the_policy_only(graph: grimp.ImportGraph) -> None:
    offending = {
        module: sorted(m for m in graph.find_modules_directly_imported_by(module) if _under(m, POLICY_INTERNALS))
        for module in graph.modules
        if _under(module, ("tasks", "flows", "tracking", "preflight"))
    }
    assert {m: found for m, found in offending.items() if found} == {}


def test_dependencies_point_one_way(graph: grimp.ImportGraph) -> None:
    upward = [
        (module, imported)
        for module in graph.modules
        if _under(module, ("backends", "workflows", "buffer", "checkpointing", "schemas", "algorithms"))
        for imported in graph.find_modules_directly_imported_by(module)
        if _under(imported, ("tracking", "preflight", "tasks", "flows", "cli", "deployments"))
    ]
    assert upward == []


def test_tracking_and_the_preflight_sit_below_the_tasks(graph: grimp.ImportGraph) -> None:
    """tracking: below the pre-flight (which asks it where MLflow is); both: below tasks, flows and the CLI."""
    above = {"tracking": ("preflight", "tasks", "flows", "cli", "deployments"),
             "preflight": ("tasks", "flows", "cli", "deployments")}
    upward = [
        (module, imported)
        for package, higher in above.items()
        for module in graph.modules
        if _under(module, (package,))
        for imported in graph.find_modules_directly_imported_by(module)
        if _under(imported, higher)
    ]
    assert upward == []


def test_no_import_circle_between_backend_modules(graph: grimp.ImportGraph) -> None:
    backends = sorted(m for m in graph.modules if _under(m, ("backends",)))
    circles = [
        (a, b)
        for i, a in enumerate(backends)
        for b in backends[i + 1 :]
        if graph.chain_exists(importer=a, imported=b) and graph.chain_exists(importer=b, imported=a)
    ]
    assert circles == []
