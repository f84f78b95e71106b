"""Import a Trinity-RFT YAML file as an `ExperimentConfig`.

- The file is read as Trinity reads it (schemas/trinity/yaml_file.py: OmegaConf, interpolations resolved).
- Trinity's aliases are accepted: taskset/tasksets, task_selector/data_selector, warmup_style/
  lr_scheduler_type, sync_method online/offline, sync_style dynamic_by_explorer/dynamic_by_trainer,
  storage_type sql, train_batch_size 0 (= derive it); `algorithm.loss_agg_mode` moves into
  `policy_loss_fn_args`; `model.tinker` becomes the Tinker trainer and sampler (`schemas.trinity.aliases`).
- Sections that are one choice of backend (`trainer`, `explorer.rollout_model`) are read as the chosen
  variant: a setting the chosen backend does not have is reported like an unknown key.
- A `data_processor` section that sets nothing (`data_processor: {}`) is left out; one that sets
  anything is reported like any key we do not support.
- Trinity keys without effect in Trinity's current version, or without effect on results (NO_EFFECT:
  buffer retries, the deprecated explorer.runner_num, rollout_args.n, log, W&B previews, veRL batching
  settings beside Tinker or the torch trainer, the explorer's concurrent_mode and runner splitting; NO_EFFECT_WHEN:
  a replay buffer, an over-rollout or a dynamic timeout that is off, bypass_old_logprobs true) are left out
  with a warning and an ALIAS note in `derived`; their other values are reported with why (UNSUPPORTED_WHY).
- Every key we do not support is returned by its dotted path (never dropped silently), and so is every
  key that maps onto a field the runtime refuses (a `SETTINGS` entry), with the reason; the caller
  decides whether that is fatal (`rft import-trinity` fails unless `--allow-unsupported`). Keys that map
  onto a warned field are kept and listed in the config's `warnings`.
- Trinity's defaults of the experiment identity apply when the file omits them (project "Trinity-RFT", name "rft");
  all other defaults of our schema equal Trinity's. `rft import-trinity --write` writes the result as a recipe
  (schemas/trinity/recipe_source.py).
"""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ValidationError

from schemas import support_check
from schemas.base import ALIAS, ConfigRuleError
from schemas.errors import error_items
from schemas.experiment import ExperimentConfig
from schemas.overrides import delete_path
from schemas.trainer import DEFAULT_TRAINER_TYPE
from schemas.trinity.aliases import apply_aliases
from schemas.trinity.keys import (
    EMPTY_SECTIONS,
    KEY_RENAMES,
    NO_EFFECT,
    NO_EFFECT_WHEN,
    PRE_0_2_LAYOUT,
    TRINITY_IDENTITY_DEFAULTS,
    UNSUPPORTED_VALUES,
    UNSUPPORTED_WHY,
    VERL_TO_TORCH,
)
from schemas.trinity.yaml_file import TrinityImportError, load_resolved


def import_trinity(path: str | Path) -> tuple[ExperimentConfig, list[str]]:
    """Read a Trinity-RFT YAML; return the validated config and what could not be imported: keys we do
    not have (their dotted paths, `path=value` for an unsupported value) and keys that map onto a field
    the runtime refuses (`path: why`, see a `SETTINGS` entry), all left out of the config. Keys that map
    onto a warned field stay, and are listed in the config's (and its stages') `warnings`.

    Trinity's trainer is veRL (its default). Where the veRL trainer here cannot run what the file asks (a
    critic, a preference or mix loss) and the torch trainer runs strictly more of it, the file is read for the
    torch trainer, with a warning and a note in `derived` saying why (`VERL_TO_TORCH`).

    Raises `TrinityImportError` for unreadable files, pydantic's ValidationError for invalid settings, and
    ConfigRuleError listing the refused keys too when the rest does not validate.
    """
    on_verl, verl_problems = _attempt(path, None)
    if not verl_problems or not _written_for_verl(path):
        return _result(on_verl)
    on_torch, torch_problems = _attempt(path, "torch")
    if not set(torch_problems) < set(verl_problems):  # the torch trainer must run strictly more of it
        return _result(on_verl)
    config, unsupported = _result(on_torch)  # raises what is left to fix on the torch trainer, if anything
    why = "; ".join(f"{p}: {verl_problems[p]}" for p in verl_problems if p not in torch_problems)
    note = VERL_TO_TORCH + why
    config.derived = {**config.derived, "trainer.trainer_type": f"{ALIAS}{note}"}
    config.warnings = [*config.warnings, f"trainer.trainer_type: {note}"]
    return config, unsupported


def _written_for_verl(path: str | Path) -> bool:
    """The file trains on veRL: it names it, or names no trainer (Trinity's default) and no Tinker."""
    raw = load_resolved(Path(path))
    model, trainer = raw.get("model") or {}, raw.get("trainer") or {}
    if isinstance(model, dict) and isinstance(model.get("tinker"), dict) and model["tinker"].get("enable"):
        return False
    return isinstance(trainer, dict) and trainer.get("trainer_type", DEFAULT_TRAINER_TYPE) == DEFAULT_TRAINER_TYPE


Attempt = tuple[ExperimentConfig, list[str]] | Exception


def _attempt(path: str | Path, trainer_type: str | None) -> tuple[Attempt, dict[str, str]]:
    """An import for `trainer_type` (None: the file's), and {path: why} of all it could not take: the keys
    left out, and the errors when it failed."""
    try:
        config, unsupported = _import_as(path, trainer_type)
    except (ValidationError, ConfigRuleError) as exc:
        errors = exc.problems if isinstance(exc, ConfigRuleError) else error_items(exc)
        return exc, {**_by_path(_trinity_data(path, trainer_type)[1]), **dict(errors)}
    return (config, unsupported), _by_path(unsupported)


def _by_path(unsupported: list[str]) -> dict[str, str]:
    return dict(item.partition(": ")[::2] for item in unsupported)


def _result(attempt: Attempt) -> tuple[ExperimentConfig, list[str]]:
    if isinstance(attempt, Exception):
        raise attempt
    return attempt


def _import_as(path: str | Path, trainer_type: str | None) -> tuple[ExperimentConfig, list[str]]:
    """`import_trinity`, with the file's trainer_type replaced by `trainer_type` when given."""
    data, unsupported, ignored, refused = _trinity_data(path, trainer_type)
    with support_check.collecting() as findings:
        try:
            ExperimentConfig.model_validate(copy.deepcopy(data))
        except (ValidationError, ConfigRuleError):
            pass  # validated again below, without what is refused
    for finding in _deduplicated(f for f in findings if f.level == "refuse"):
        if finding.key.endswith("]"):
            continue  # a refused choice (a preset, a function): validation below names it
        refused.append((finding.path, finding.reason))
        _drop(data, finding.path)
    unsupported += [f"{path}: {why}" for path, why in refused]
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        if not refused:
            raise
        errors = error_items(exc)
        if any(p.endswith("workflow_type") for p, _ in refused):  # the task sets left without one say so too
            errors = [(p, why) for p, why in errors if not why.startswith("no workflow: ")]
        raise ConfigRuleError([*refused, *errors]) from None
    config.warnings += [f"{path}: left out: {why}" for path, why in ignored.items()]
    return config, unsupported


def _deduplicated(findings: Any) -> list[support_check.Finding]:
    """Findings of the base config once: a stage that inherits the same setting is not listed again."""
    found = list(findings)
    base = {(f.path, f.reason) for f in found if not f.path.startswith("stages.")}
    out: list[support_check.Finding] = []
    for f in found:
        inherited = f.path.startswith("stages.") and (f.path.split(".", 2)[2], f.reason) in base
        if not inherited and f not in out:
            out.append(f)
    return out


def _drop(data: dict[str, Any], path: str) -> None:
    """Remove a refused setting from the imported data: from the stage that sets it, else from the base."""
    parts = path.split(".")
    if parts[0] == "stages" and isinstance(data.get("stages"), list):
        stage = data["stages"][int(parts[1])]
        if isinstance(stage, dict) and parts[2] in stage:
            delete_path(stage, _in_data(stage, ".".join(parts[2:])))
            return
        path = ".".join(parts[2:])
    delete_path(data, _in_data(data, path))


def _in_data(data: dict[str, Any], path: str) -> str:
    """`path` as the imported data spells it (Trinity's one-item `tasksets` list)."""
    taskset = "buffer.explorer_input.taskset."
    explorer_input = (data.get("buffer") or {}).get("explorer_input") or {}
    if path.startswith(taskset) and "tasksets" in explorer_input:
        return "buffer.explorer_input.tasksets.0." + path.removeprefix(taskset)
    return path


def trinity_data(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """The file's settings mapped onto our schema's keys (not yet validated), and unsupported paths."""
    data, unsupported, _, _ = _trinity_data(path)
    return data, unsupported


def _trinity_data(path: str | Path, trainer_type: str | None = None,
                  ) -> tuple[dict[str, Any], list[str], dict[str, str], list[tuple[str, str]]]:
    """`trinity_data`; the keys left out because they have no effect ({path: why}, noted in `derived`); and
    the settings of a mapped workflow that are not built [(path, why)], left out. `trainer_type`: read the
    file for this trainer instead of the one it names."""
    path = Path(path)
    raw = load_resolved(path)
    if not isinstance(raw, dict):
        raise TrinityImportError(f"{path}: expected a mapping of settings at the top level")
    if trainer_type is not None:
        raw["trainer"] = {**(raw.get("trainer") or {}), "trainer_type": trainer_type}
    if isinstance(raw.get("data"), dict):
        raise ConfigRuleError([("data", PRE_0_2_LAYOUT)])
    unsupported: list[str] = []
    refused: list[tuple[str, str]] = []
    raw = apply_aliases(_move_loss_agg_mode(_drop_empty_sections(raw)), refused=refused)
    if isinstance(raw.get("stages"), list):
        for i, stage in enumerate(raw["stages"]):
            if isinstance(stage, dict):
                found: list[tuple[str, str]] = []
                raw["stages"][i] = apply_aliases(_move_loss_agg_mode(_drop_empty_sections(stage)), note=False, refused=found)
                refused += [(f"stages.{i}.{p}", why) for p, why in found]
    ignored: dict[str, str] = {}
    data = _filter(raw, ExperimentConfig, "", unsupported, ignored)
    for key, value in TRINITY_IDENTITY_DEFAULTS.items():
        data.setdefault(key, value)
    if not data.get("checkpoint_root_dir"):
        data.pop("checkpoint_root_dir", None)  # Trinity's "" means "./" + default; ours is ./checkpoints
    if ignored:
        data["derived"] = {**(data.get("derived") or {}), **{p: f"{ALIAS}dropped: {why}" for p, why in ignored.items()}}
    return data, [_with_why(p) for p in unsupported], ignored, refused


def _with_why(path: str) -> str:
    """An unsupported key's path, with why where UNSUPPORTED_WHY says (a stage's key too)."""
    key = path.split(".", 2)[2] if path.startswith("stages.") else path
    return f"{path}: {UNSUPPORTED_WHY[key]}" if key in UNSUPPORTED_WHY else path


def _drop_empty_sections(section_holder: dict[str, Any]) -> dict[str, Any]:
    """Leave out the sections of EMPTY_SECTIONS that set nothing (`data_processor: {}`, as Trinity's own
    example configs write it): they mean Trinity's defaults, which are ours. One that sets anything is kept
    and reported as unsupported."""
    for key in EMPTY_SECTIONS:
        if key in section_holder and _is_empty(section_holder[key]):
            del section_holder[key]
    return section_holder


def _is_empty(value: Any) -> bool:
    """None, or mappings and lists with nothing but empty values inside."""
    if isinstance(value, dict):
        return all(_is_empty(v) for v in value.values())
    if isinstance(value, list):
        return all(_is_empty(v) for v in value)
    return value is None


def _move_loss_agg_mode(section_holder: dict[str, Any]) -> dict[str, Any]:
    alg = section_holder.get("algorithm")
    if isinstance(alg, dict) and "loss_agg_mode" in alg:
        mode = alg.pop("loss_agg_mode")
        if mode is not None:
            args = alg.get("policy_loss_fn_args") or {}
            args.setdefault("loss_agg_mode", mode)
            alg["policy_loss_fn_args"] = args
    return section_holder


def _model_of(annotation: Any) -> tuple[str, Any]:
    """Classify an annotation: ("model", cls), ("variants", (cls, ...)), ("list", inner) or ("value", None)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(models) > 1:
            return "variants", tuple(models)
        for arg in typing.get_args(annotation):
            kind, inner = _model_of(arg)
            if kind in ("model", "list"):
                return kind, inner
        return "value", None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    if origin is list:
        return "list", typing.get_args(annotation)[0]
    return "value", None


def _filter(data: dict[str, Any], model: type[BaseModel], prefix: str, unsupported: list[str],
            ignored: dict[str, str]) -> dict[str, Any]:
    """Keep the keys `model` knows (recursively); record the others' paths in `unsupported`, or in `ignored`
    with why for those of NO_EFFECT."""
    renames = dict(KEY_RENAMES.get(model.__name__, {}))
    if model.__name__ == "ExplorerInput":
        renames["tasksets"] = "tasksets"  # alias kept for the schema to normalise
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        target = renames.get(key, key)
        if target == "tasksets":
            item_ann: Any = model.model_fields["taskset"].annotation
            field_ann: Any = list[item_ann]  # type: ignore[valid-type]
        elif target in model.model_fields:
            field_ann = model.model_fields[target].annotation
        elif why := _no_effect(model, target, value):
            ignored[path] = why
            continue
        else:
            not_here = getattr(model, "NOT_HERE", {}).get(target)  # a Trinity key this section has not, and why
            unsupported.append(f"{path}: {not_here}" if not_here else path)
            continue
        if path in UNSUPPORTED_VALUES and value in UNSUPPORTED_VALUES[path]:
            unsupported.append(f"{path}={value}")
            continue
        kind, inner = _model_of(field_ann)
        if kind == "variants" and isinstance(value, dict):
            kind, inner = "model", _chosen_variant(inner, value)
        if kind == "model" and isinstance(value, dict):
            value = _filter(value, inner, f"{path}.", unsupported, ignored)
        elif kind == "list" and isinstance(value, list):
            inner_kind, inner_model = _model_of(inner)
            if inner_kind in ("model", "variants"):
                value = [
                    _filter(item, _chosen_variant(inner_model, item) if inner_kind == "variants" else inner_model,
                            f"{path}.{i}.", unsupported, ignored) if isinstance(item, dict) else item
                    for i, item in enumerate(value)
                ]
        out[target] = value
    return out


def _no_effect(model: type[BaseModel], key: str, value: Any) -> str | None:
    """Why Trinity's `key` of a `model` section has no effect (NO_EFFECT, NO_EFFECT_WHEN), else None."""
    for cls in model.__mro__:
        if why := NO_EFFECT.get(cls.__name__, {}).get(key):
            return why
        when = NO_EFFECT_WHEN.get(cls.__name__, {}).get(key)
        if when and when[0](value):
            return when[1]
    return None


def _chosen_variant(variants: tuple[type[BaseModel], ...], value: dict[str, Any]) -> type[BaseModel]:
    """The variant of a tagged union that `value`'s tag names (the first variant when it names none)."""
    tags = [name for name in variants[0].model_fields
            if all(typing.get_origin(v.model_fields.get(name).annotation if name in v.model_fields else None)
                   is typing.Literal for v in variants)]
    for tag in tags:
        for variant in variants:
            if value.get(tag) in typing.get_args(variant.model_fields[tag].annotation):
                return variant
    return variants[0]
