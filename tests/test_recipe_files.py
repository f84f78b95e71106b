"""A .py recipe is code: the CLI's help says so. The deployments' parameters are data: the `rft` flow takes a
config, overrides and a flag, and no override names a file to load."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from cli.main import app
from deployments import load_recipe, prefect_yaml
from deployments.prefect_yaml import PREFECT_YAML
from schemas import UnknownSettingError


@pytest.mark.parametrize("command", ["run", "validate"])
def test_the_help_says_a_py_recipe_runs_as_code(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    text = re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", result.output))
    assert result.exit_code == 0
    assert "A .py recipe is Python code" in text and "use only files you trust" in text


def test_the_flow_parameters_are_data_and_name_no_file() -> None:
    from prefect.utilities.callables import parameter_schema

    from flows.rft import rft

    assert set(parameter_schema(rft.fn).properties) == {"config", "overrides", "name_per_flow_run"}
    for path in ("recipe", "recipe_file", "config_file"):
        with pytest.raises(UnknownSettingError, match=path):
            load_recipe("smoke").with_overrides({path: "elsewhere/recipe.py"})


def test_prefect_yaml_is_generated_from_the_recipes() -> None:
    # In the light suite: a recipe edit without the regenerated file should fail in seconds, not after the slow tests.
    assert PREFECT_YAML.read_text() == prefect_yaml.render(), "run: python -m deployments.prefect_yaml"
