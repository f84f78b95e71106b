"""Property-based fuzz (hypothesis) of what a user types: `--set PATH=VALUE` and Trinity YAML documents.

Every input either validates, or fails with one of the errors the CLI prints as lines (pydantic's
ValidationError, ConfigRuleError, UnknownSettingError, TrinityImportError, the `--set` syntax error), each
line naming a setting (`dotted.path: ...`) or the file and line. Any other exception — a TypeError, an
AttributeError, a RecursionError — is a traceback the user would see, and fails the test.

1,100 cases per run (600 `--set`, 500 YAML), derandomized so CI runs the same ones; no example database.
"""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Union

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from deployments import load_recipe
from schemas import ConfigRuleError, ExperimentConfig, TrinityImportError, UnknownSettingError, describe_errors, parse_set_args
from schemas.trinity.importer import import_trinity
from schemas.trinity.yaml_file import load_resolved

FIXTURES = Path(__file__).parent / "fixtures" / "trinity"
SET_CASES, YAML_CASES = 600, 500
FUZZ = settings(deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _models(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """The section models an annotation holds (a union of variants gives several), and whether it is a list."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        found: list[type[BaseModel]] = []
        is_list = False
        for arg in typing.get_args(annotation):
            models, listed = _models(arg)
            found += models
            is_list |= listed
        return found, is_list
    if origin is list:
        return _models(typing.get_args(annotation)[0])[0], True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


def setting_paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> list[str]:
    """Every dotted path of a setting and a section (a list's first item as `.0`), over all backend variants."""
    out: list[str] = []
    for name, field in model.model_fields.items():
        if name in ("derived", "warnings"):
            continue
        path = f"{prefix}{name}"
        out.append(path)
        models, is_list = _models(field.annotation)
        if depth < 6:
            for inner in models:
                out += setting_paths(inner, f"{path}.0." if is_list else f"{path}.", depth + 1)
    return list(dict.fromkeys(out))


def literal_values(model: type[BaseModel], seen: set[type] | None = None) -> set[Any]:
    """Every value a Literal setting of the schema takes (engine types, modes, loss names...)."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    out: set[Any] = set()
    for field in model.model_fields.values():
        todo = [field.annotation]
        while todo:
            ann = todo.pop()
            if typing.get_origin(ann) is typing.Literal:
                out.update(typing.get_args(ann))
            todo += [a for a in typing.get_args(ann) if not isinstance(a, (str, int, float))]
        for inner in _models(field.annotation)[0]:
            out |= literal_values(inner, seen)
    return out


PATHS = setting_paths(ExperimentConfig)
FIELD_NAMES = sorted({p.rsplit(".", 1)[-1] for p in PATHS if not p.endswith(".0")})
LITERALS = sorted(literal_values(ExperimentConfig), key=repr)
TOP = {name for name in ExperimentConfig.model_fields}
NAMED_LINE = re.compile(r"^(?P<top>[A-Za-z_]+)[.:]")  # "section.setting...: what is wrong" (keys below may be any text)


def errors_of(call: typing.Callable[[], Any]) -> list[str] | None:
    """None when `call` succeeds; else its error as the CLI prints it (anything unexpected propagates)."""
    try:
        call()
    except ValidationError as exc:
        event("refused: ValidationError")
        return describe_errors(exc)
    except ConfigRuleError as exc:
        event("refused: ConfigRuleError")
        return [f"{p}: {m}" for p, m in exc.problems]
    except (UnknownSettingError, TrinityImportError) as exc:
        event(f"refused: {type(exc).__name__}")
        return [str(exc)]
    event("valid")
    return None


def assert_names_a_setting(lines: list[str], allowed_prefixes: tuple[str, ...] = ()) -> None:
    assert lines, "an error without a message"
    for line in lines:
        if line.startswith(allowed_prefixes):
            continue
        match = NAMED_LINE.match(line)
        assert match and match["top"] in TOP, f"no setting named: {line!r}"


# -- --set ------------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.integers(0, 16), st.floats(0, 1), st.sampled_from(LITERALS),
    st.sampled_from(["grpo", "0.0.0.0", "../x", "/tmp/elsewhere", "http://user:pw@host", "a/b", "~"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(FIELD_NAMES) | st.text(max_size=6), inner, max_size=3), max_leaves=6)
# What follows `=`: a JSON value, or text as typed (YAML scalars, broken JSON, tags, anchors, dates).
raw_values = st.one_of(
    values.map(json.dumps),
    st.text(max_size=20),
    st.sampled_from(["", "null", "~", "yes", "off", "2001-01-01", "1e400", "-inf", "nan", "[", "{a: 1", "!!python/name:os.system",
                     "&a [*a]", "0x10", "1_000", "'", "{\"a\": }", "- 1\n- 2", "!!binary aGk=", "12:30:00"]),
)
paths = st.one_of(
    st.sampled_from(PATHS),
    st.sampled_from(PATHS),
    st.sampled_from(PATHS),
    st.sampled_from(PATHS).map(lambda p: p + ".x"),
    st.sampled_from(PATHS).flatmap(lambda p: st.integers(0, 3).map(lambda i: f"{p}.{i}")),
    st.text(max_size=15),
    st.sampled_from(["derived.x", "warnings", "model.tinker.enable", "model.tinker.rank", "..", "a..b", " name", "stages.0.mode"]),
)


SMOKE = load_recipe("smoke")


@settings(FUZZ, max_examples=SET_CASES)
@given(path=paths, value=raw_values)
@example(path="trainer.trainer_type", value="[]")  # found by this test: a TypeError once
@example(path="explorer.rollout_model.engine_type", value="{}")
@example(path="stages.0.trainer.save_interval", value="2")  # was refused as "not a section"
def test_set_values_validate_or_name_the_setting(path: str, value: str) -> None:
    item = f"{path}={value}"
    try:
        overrides = parse_set_args([item])
    except ValueError as exc:  # not PATH=VALUE
        assert str(exc).startswith("--set "), exc
        event("refused: not PATH=VALUE")
        return
    lines = errors_of(lambda: SMOKE.with_overrides(overrides))
    if lines is not None:
        assert_names_a_setting(lines, allowed_prefixes=("unknown setting ", f"{path.strip()!r}: index "))
        if lines[0].startswith("unknown setting ") and path.strip() in PATHS:
            raise AssertionError(f"a setting of the schema refused as unknown: {lines[0]}")


# -- Trinity YAML -----------------------------------------------------------------------------------

SEEDS = [load_resolved(path) for path in sorted(FIXTURES.glob("*.yaml"))]


def _spots(data: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a document: a key of a mapping, an item of a list."""
    out = [at]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _spots(value, (*at, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _spots(value, (*at, i))
    return out


def _mutate(doc: Any, draw: st.DrawFn) -> Any:
    """Up to 4 edits: a value replaced, a key deleted, a key added (a setting's name or any text)."""
    for _ in range(draw(st.integers(1, 4))):
        spots = _spots(doc)
        spot = draw(st.sampled_from(spots))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not spot:
            if action == "replace":
                doc = draw(values)
            continue
        parent = doc
        for part in spot[:-1]:
            parent = parent[part]
        if action == "replace":
            parent[spot[-1]] = draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[spot[-1]]
        elif action == "add" and isinstance(parent[spot[-1]], dict):
            parent[spot[-1]][draw(st.sampled_from(FIELD_NAMES) | st.text(max_size=6))] = draw(values)
    return doc


@st.composite
def documents(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "text", "garbled"]))
    if kind == "text":
        return draw(st.text(max_size=200))
    text = yaml.safe_dump(_mutate(json.loads(json.dumps(draw(st.sampled_from(SEEDS)))), draw), allow_unicode=True)
    if kind == "garbled":  # a line of anything, somewhere: broken syntax, interpolations, tabs
        lines = text.splitlines()
        junk = draw(st.text(max_size=30) | st.sampled_from(["${oc.env:RFT_FUZZ_UNSET}", "${nothing.here}", "\tx: 1",
                                                           "  - [", "key: {a: ${oc.env:X,1}}", "!!python/object:os.system {}"]))
        lines.insert(draw(st.integers(0, len(lines))), junk)
        text = "\n".join(lines)
    return text


@pytest.fixture(scope="module")
def yaml_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "trinity.yaml"


@settings(FUZZ, max_examples=YAML_CASES)
@given(text=documents())
@example(text="0")  # found by this test: OmegaConf's AssertionError once
@example(text="\x1f")  # a bad character, reported by offset only
@example(text="explorer: {rollout_model: {engine_type: []}}")  # a TypeError once
def test_trinity_yaml_imports_or_names_the_setting_or_line(yaml_file: Path, text: str) -> None:
    yaml_file.write_text(text, encoding="utf-8")
    lines = errors_of(lambda: import_trinity(yaml_file))
    if lines is not None:
        assert_names_a_setting(lines, allowed_prefixes=(str(yaml_file),))
        for line in lines:
            if line.startswith(f"{yaml_file}: not valid YAML"):
                assert re.search(r"line \d+", line), line
