"""The schema, walked: every place of `ExperimentConfig` that can have a `SETTINGS` entry (each field,
tagged-union variant, list item, algorithm preset and function of a registry), for the checks and generated pages
that go over all of them."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from schemas.algorithm_registry import ALGORITHM_PRESETS, FUNCTION_REGISTRIES
from schemas.base import SECTIONS


@dataclass(frozen=True)
class Node:
    """One place in the schema that needs an entry (or, for Literal values, may have one)."""

    key: str
    leaf: str  # the attribute name the runtime reads (a field), or the value (a variant)
    kind: Literal["field", "section", "variant", "value"]
    required: bool
    literals: tuple[str, ...] = ()  # the values of a Literal field
    parent_field: str = ""  # a variant/value: the key of the field it is a value of
    model: type[BaseModel] | None = None  # a field of a settings class: that class (None: a function's argument)


def _unwrap(annotation: Any) -> Any:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _union_args(annotation: Any) -> list[Any] | None:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return None


def _literals(annotation: Any) -> tuple[str, ...]:
    annotation = _unwrap(annotation)
    args = _union_args(annotation)
    for arg in args if args is not None else [annotation]:
        if typing.get_origin(arg) is Literal:
            return tuple(str(v) for v in typing.get_args(arg))
    return ()


def _variant_tag(model: type[BaseModel]) -> str:
    tag = model.TAG  # type: ignore[attr-defined]
    return str(typing.get_args(model.model_fields[tag].annotation)[0])


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


# Called with each settings class the walk enters and the key prefix of its fields (`buffer.explorer_input.`).
Visit = Callable[[str, type[BaseModel]], None]


def walk(root: type[BaseModel], visit: Visit | None = None) -> list[Node]:
    """Every node of the schema of `root` (ExperimentConfig), function registries included.

    A stage's sections (`stages[].algorithm`, ...) are not walked: each stage is resolved into a whole
    ExperimentConfig and validated by the same rules, so the top-level entries apply to it.
    """
    stage = _list_models(root.model_fields["stages"].annotation)[0]
    nodes = walk_model(root, "", skip={"stages"}, visit=visit)
    nodes += walk_model(stage, "stages[].", skip=set(SECTIONS), visit=visit)
    nodes += _registry_nodes()
    return nodes


def is_function_field(name: str) -> bool:
    """A field of the algorithm that names a function of a registry (policy_loss_fn, ...) or holds its arguments."""
    return name in FUNCTION_REGISTRIES or name.removesuffix("_args") in FUNCTION_REGISTRIES


def walk_model(model: type[BaseModel], prefix: str, skip: set[str] | None = None, visit: Visit | None = None) -> list[Node]:
    if visit is not None:
        visit(prefix, model)
    nodes: list[Node] = []
    tag_field = getattr(model, "TAG", None)  # a variant's tag: its variant node stands for it
    for name, info in model.model_fields.items():
        if (skip and name in skip) or name == tag_field:
            continue
        key = f"{prefix}{name}"
        if model.__name__ == "AlgorithmConfig" and is_function_field(name):
            continue  # walked with their registries (_registry_nodes)
        ann = _unwrap(info.annotation)
        args = _union_args(ann)
        models = [a for a in (args or [ann]) if _is_model(a)]
        lists = [a for a in (args or [ann]) if typing.get_origin(a) is list]
        dicts = [a for a in (args or [ann]) if typing.get_origin(a) is dict and _is_model(typing.get_args(a)[1])]
        if dicts:  # a mapping of named sections (buffer.trainer_input.auxiliary_buffers): its items, like a list's
            nodes.append(Node(key, name, "section", False))
            nodes += walk_model(typing.get_args(dicts[0])[1], f"{key}[].", visit=visit)
        elif len(models) > 1:  # a tagged union of sections
            nodes.append(Node(key, name, "section", False))
            for variant in models:
                tag = _variant_tag(variant)
                nodes.append(Node(f"{key}[{tag}]", tag, "variant", True, parent_field=key))
                nodes += walk_model(variant, f"{key}[{tag}].", visit=visit)
        elif models:
            nodes.append(Node(key, name, "section", False))
            nodes += walk_model(models[0], f"{key}.", visit=visit)
        elif lists and _list_models(lists[0]):
            nodes.append(Node(key, name, "section", False))
            item_models = _list_models(lists[0])
            if len(item_models) > 1:
                for variant in item_models:
                    tag = _variant_tag(variant)
                    nodes.append(Node(f"{key}[][{tag}]", tag, "variant", True, parent_field=f"{key}[]"))
                    nodes += walk_model(variant, f"{key}[][{tag}].", visit=visit)
            else:
                nodes += walk_model(item_models[0], f"{key}[].", visit=visit)
        else:
            literals = _literals(ann)
            nodes.append(Node(key, name, "field", True, literals=literals, model=model))
            nodes += [Node(f"{key}[{v}]", v, "value", False, parent_field=key) for v in literals]
    if model.__name__ == "AlgorithmConfig":
        nodes += [Node(f"{prefix}algorithm_type[{p}]", p, "variant", True, parent_field=f"{prefix}algorithm_type")
                  for p in ALGORITHM_PRESETS]
    return nodes


def _list_models(list_annotation: Any) -> list[type[BaseModel]]:
    inner = _unwrap(typing.get_args(list_annotation)[0])
    return [a for a in (_union_args(inner) or [inner]) if _is_model(a)]


def _registry_nodes() -> list[Node]:
    """algorithm.<fn>[<name>] for every registered function, and .<arg> for each of its arguments."""
    nodes: list[Node] = []
    for fn, registry in FUNCTION_REGISTRIES.items():
        nodes.append(Node(f"algorithm.{fn}", fn, "field", True))
        for name, args_model in registry.items():
            key = f"algorithm.{fn}[{name}]"
            nodes.append(Node(key, name, "variant", True, parent_field=f"algorithm.{fn}"))
            for arg, info in args_model.model_fields.items():
                nodes.append(Node(f"{key}.{arg}", arg, "field", True, literals=_literals(info.annotation)))
    return nodes
