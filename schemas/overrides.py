"""Dotted-path access to config data: `--set` parsing, override application, derived-value stripping.

A path is dot-separated; list items are addressed by their index (`buffer.explorer_input.eval_tasksets.0.split`)
and free-form dict fields (`*_args`, `workflow_args`, `trainer.trainer_config`) accept any key below them.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from typing import Any, Union

import yaml
from pydantic import BaseModel


class UnknownSettingError(KeyError):
    """An override names a setting that does not exist."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def parse_set_args(items: list[str]) -> dict[str, Any]:
    """Parse `["algorithm.optimizer.lr=2e-6", "buffer.total_steps=3"]` into `{path: value}`.

    Values are read as JSON first (so `2e-6`, `[1, 2]`, `{"a": 1}`, `null` work), then as a YAML scalar
    (`true`, `off`, bare strings); anything else stays a string.
    """
    out: dict[str, Any] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise ValueError(f"--set {item!r}: expected PATH=VALUE, e.g. algorithm.optimizer.lr=2e-6")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                value = raw
            if value is None and raw.strip() not in ("", "~", "null", "Null", "NULL"):
                value = raw
        out[path] = value
    return out


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional/Union-with-None; a union of models (a tagged union of sections)
    comes back as the tuple of its models."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(models) > 1:
            return tuple(models)
        if models:
            return models[0]
        return _unwrap(args[0]) if len(args) == 1 else annotation  # Optional[an Annotated union of sections]
    return annotation


def check_path(model_cls: type[BaseModel], path: str) -> None:
    """Raise UnknownSettingError unless `path` names a setting of `model_cls` (or lies in a free dict).
    Below a tagged union of sections, a field of any variant passes (validation then checks the chosen one)."""
    parts = path.split(".")
    current: Any = model_cls
    walked: list[str] = []
    for part in parts:
        ann = _unwrap(current)
        origin = typing.get_origin(ann)
        if isinstance(ann, tuple) or (isinstance(ann, type) and issubclass(ann, BaseModel)):
            variants = ann if isinstance(ann, tuple) else (ann,)
            owner = next((v for v in variants if part in v.model_fields), None)
            if owner is None:
                if any(part in getattr(v, "NOT_HERE", {}) for v in variants):
                    return  # validation refuses it, with why (Section.NOT_HERE)
                where = ".".join(walked) or "the experiment config"
                fields = dict.fromkeys(f for v in variants for f in v.model_fields)
                raise UnknownSettingError(
                    f"unknown setting {path!r}: {where} has no field {part!r}; "
                    f"its fields: {', '.join(fields)}"
                )
            current = owner.model_fields[part].annotation
        elif origin in (list, tuple):
            if not part.isdigit():
                raise UnknownSettingError(f"unknown setting {path!r}: {'.'.join(walked)} is a list; use an index")
            current = typing.get_args(ann)[0]
        elif origin is dict or ann is dict or ann is Any:
            return  # free-form mapping: any key below is allowed
        else:
            raise UnknownSettingError(f"unknown setting {path!r}: {'.'.join(walked)} is a value, not a section")
        walked.append(part)


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at `path` inside nested dicts/lists, creating missing dicts."""
    parts = path.split(".")
    node: Any = data
    for part in parts[:-1]:
        if isinstance(node, list):
            idx = int(part)
            if idx >= len(node):
                raise UnknownSettingError(f"{path!r}: index {idx} is past the end of a list of {len(node)}")
            node = node[idx]
            continue
        if not isinstance(node.get(part), (dict, list)):
            node[part] = {}
        node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        idx = int(last)
        if idx >= len(node):
            raise UnknownSettingError(f"{path!r}: index {idx} is past the end of a list of {len(node)}")
        node[idx] = value
    else:
        node[last] = value


def delete_path(data: Any, path: str) -> None:
    """Remove the value at `path` if present (missing intermediate nodes are fine)."""
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return
        if node is None:
            return
    last = parts[-1]
    if isinstance(node, dict):
        node.pop(last, None)


def strip_paths(data: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """A deep copy of `data` without the given paths."""
    data = copy.deepcopy(data)
    for path in sorted(paths, key=lambda p: -p.count(".")):
        delete_path(data, path)
    return data
