"""Reading a Trinity-RFT YAML file as Trinity does: OmegaConf, its interpolations (`${oc.env:VAR,default}`, `${a.b}`)
resolved, and each problem of the file named with its path and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException


class TrinityImportError(ValueError):
    """The file cannot be read as a Trinity config (YAML syntax, interpolation, not a mapping)."""



def load_resolved(path: Path) -> Any:
    """Parse with OmegaConf and resolve interpolations (${oc.env:VAR,default}, ${a.b})."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrinityImportError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        conf = _create(path, text)
    except yaml.YAMLError as first:
        # Trinity's docs put ${...} inside flow mappings ({path: ${oc.env:X,y}}), which YAML rejects;
        # quoting those interpolations keeps their meaning for OmegaConf.
        try:
            conf = _create(path, _quote_interpolations(text))
        except yaml.YAMLError:
            raise TrinityImportError(f"{path}: not valid YAML: {_yaml_problem(first, text, path)}") from first
    except OmegaConfBaseException as exc:
        raise TrinityImportError(f"{path}: {exc}") from exc
    try:
        return OmegaConf.to_container(conf, resolve=True)
    except OmegaConfBaseException as exc:
        raise TrinityImportError(f"{path}: cannot resolve an interpolation: {exc}") from exc


def _create(path: Path, text: str) -> Any:
    try:
        return OmegaConf.create(text)
    except AssertionError:  # OmegaConf asserts that the document is a mapping or a list
        raise TrinityImportError(f"{path}: expected a mapping of settings at the top level") from None


def _yaml_problem(error: yaml.YAMLError, text: str, path: Path) -> str:
    """PyYAML's message with the file's name; a bad character (reported by offset) by its line too."""
    if isinstance(error, yaml.reader.ReaderError):
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        return f"{error.reason} (#x{error.character:04x}) at line {line}, column {column}"
    return str(error).replace('"<unicode string>"', str(path))


def _quote_interpolations(text: str) -> str:
    """Wrap each unquoted ${...} that starts a plain YAML value in single quotes."""
    out: list[str] = []
    i = 0
    while (start := text.find("${", i)) != -1:
        before = text[:start].rstrip(" ")
        depth, end = 0, start + 1
        while end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
            end += 1
        if before and before[-1] in ":,[-{" and end < len(text):
            out.append(text[i:start] + "'" + text[start : end + 1].replace("'", "''") + "'")
        else:
            out.append(text[i : end + 1])
        i = end + 1
    out.append(text[i:])
    return "".join(out)
