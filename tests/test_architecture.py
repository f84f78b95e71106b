"""The layers' imports, read from the code by grimp.

Layers, bottom to top (a module may import its own package and the packages below it, never above):

    algorithms     the RL math; imports nothing of the project, and neither torch nor veRL at import time
    generators     generated tasksets: each generator's rows and the model of its arguments; the games' rules
    schemas        the settings: their shapes, each backend's facts and rules (its settings class), the
                   cross-section rules; derives its function registries from algorithms'
    checkpointing  the experiment folder on disk, model folders, checkpoint formats
    buffer         task sets and experiences
    backends       trainers, engines and the policies that hold them (each backend a folder)
    workflows      rollouts: tasks into experiences
    tracking       the monitors (MLflow, TensorBoard, W&B), the spool, curves, model registry
    preflight      the checks before a run (cluster and MLflow, model, data, disk); asks tracking where MLflow is
    tasks          Prefect tasks (talk to a policy, never to Ray or a trainer class)
    flows          Prefect flows
    deployments    recipes and the deployments made of them
    cli            the `rft` command

`algorithms` sits below `schemas` because a function and the model of its arguments are one module
(algorithms/registry.py): the schema reads the models to check `*_fn_args`.

No import circle between modules: imports inside functions count (they run), and so do imports under
`if TYPE_CHECKING:` (a reader follows them too). A section's rules read the rest of the config through
schemas/sections.py's Protocol; only the rules that join sections (schemas/rules.py, schemas/support_check.py) see
every section, as schemas/experiment_fields.py's `ExperimentFields`, below the `ExperimentConfig` that applies them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("algorithms", "generators", "schemas", "checkpointing", "buffer", "backends", "workflows", "tracking", "preflight",
          "tasks", "flows", "deployments", "cli")
PACKAGES = LAYERS
# What only a policy may touch: the Ray runtime, the local actors, the Tinker clients and SDK, and the
# trainer implementations.
POLICY_INTERNALS = ("ray", "vllm", "tinker", "backends.local", "backends.tinker", "backends.torch_trainer", "backends.registry")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # no cache: a stale one (.grimp_cache) would hide a new import
    return grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _lines(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    return "; ".join(f"line {d['line_number']}: {d['line_contents']}"
                     for d in graph.get_import_details(importer=importer, imported=imported))


def test_tasks_and_flows_talk_to_the_policy_only(graph: grimp.ImportGraph) -> None:
    offending = {
        module: sorted(m for m in graph.find_modules_directly_imported_by(module) if _under(m, POLICY_INTERNALS))
        for module in graph.modules
        if _under(module, ("tasks", "flows"))
    }
    assert {m: found for m, found in offending.items() if found} == {}


def test_no_import_reaches_a_higher_layer(graph: grimp.ImportGraph) -> None:
    rank = {package: i for i, package in enumerate(LAYERS)}
    upward = [
        f"{module} → {imported} ({_lines(graph, module, imported)})"
        for module in sorted(graph.modules)
        if module.split(".")[0] in rank
        for imported in sorted(graph.find_modules_directly_imported_by(module))
        if imported.split(".")[0] in rank and rank[imported.split(".")[0]] > rank[module.split(".")[0]]
    ]
    assert upward == [], "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(modules)))
    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_between_modules(graph: grimp.ImportGraph) -> None:
    circles = _circles(graph)
    described = [
        "\n".join(f"  {a} → {b} ({_lines(graph, a, b)})" for a in circle
                  for b in sorted(graph.find_modules_directly_imported_by(a)) if b in circle)
        for circle in circles
    ]
    assert circles == [], "import circles:\n" + "\n\n".join(described)


# Within schemas/, the modules that may name the root config (ExperimentConfig) or the fields all of its rules read.
ROOT_CONFIG_IMPORTERS = {"schemas.experiment": {"schemas", "schemas.trinity.importer", "schemas.trinity.recipe_source"},
                         "schemas.experiment_fields": {"schemas", "schemas.experiment", "schemas.rules",
                                                       "schemas.support_check", "schemas.rules_buffer",
                                                       "schemas.rules_explorer"}}


def test_no_section_module_imports_the_root_config(graph: grimp.ImportGraph) -> None:
    """A section's settings class reads other sections through schemas/sections.py, type-checking imports included."""
    found = {root: {m for m in graph.find_modules_that_directly_import(root) if _under(m, ("schemas",))} - allowed
             for root, allowed in ROOT_CONFIG_IMPORTERS.items()}
    assert found == {root: set() for root in ROOT_CONFIG_IMPORTERS}, {
        f"{m} imports {root} ({_lines(graph, m, root)})": "" for root, ms in found.items() for m in ms}


def test_the_circle_check_sees_imports_inside_functions() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=1, line_contents="from pkg import b")
    graph.add_import(importer="pkg.b", imported="pkg.a", line_number=9, line_contents="    from pkg import a  # in a function")
    assert _circles(graph) == [["pkg.a", "pkg.b"]]


def test_validating_a_config_imports_neither_torch_nor_verl() -> None:
    """schemas imports algorithms (the models of the functions' arguments); `rft validate` stays fast."""
    code = "import sys, schemas; print(sorted(m for m in ('torch', 'verl', 'vllm', 'ray', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", "a module of algorithms/ or schemas/ imports these at the top: " + out.stdout


def test_the_flows_import_no_model_classes() -> None:
    """Every `rft run` and every flow-run process of a Prefect worker imports the flows: transformers'
    model classes (torch._dynamo, sklearn: ~7 s on 2 cores) are imported only where a model is built."""
    heavy = ("transformers.models.auto.auto_factory", "torch._dynamo", "sklearn", "vllm", "verl")
    code = f"import sys, flows.rft; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", "a module the flows import loads these at the top: " + out.stdout


def test_every_backend_settings_variant_has_its_registry_line() -> None:
    from backends import registry
    from schemas.explorer import ENGINE_VARIANTS
    from schemas.trainer import TRAINER_VARIANTS

    assert set(TRAINER_VARIANTS) == set(registry.TRAINERS)
    assert set(ENGINE_VARIANTS) == set(registry.POLICIES)
    assert all(name in registry.SECRETS for b in (*registry.TRAINERS.values(), *registry.POLICIES.values())
               for name in b.secrets)


BACKEND_NAME_COMPARED = re.compile(r"(trainer_type|engine_type) *(==|!=| in )")


def test_no_backend_name_is_compared_outside_the_backends() -> None:
    """What differs between backends is each backend's own (its settings class, its folder): code elsewhere
    asks the chosen backend, never tests which one it is."""
    offending = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in LAYERS if package != "backends"
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BACKEND_NAME_COMPARED.search(line)
    ]
    assert offending == []
