"""`ExperimentConfig`: one typed, validated description of a whole experiment, and its stages.

Resolution (what validation does beyond field types), in order:
1. Trinity aliases are normalised (warmup_style, online/offline, dynamic_by_*, tasksets, data_selector, sql;
   `model.tinker` onto the trainer and rollout choice, see `schemas.trinity.aliases`).
2. `schemas.rules.apply_rules` fills what the user left unset — algorithm presets, function-argument
   defaults, token budgets, batch sizes, per-taskset defaults — and records each such value in
   `derived` as `{dotted.path: reason}`; contradictions raise one error listing every offending path;
   settings without effect are listed in `warnings`.
3. Every stage is resolved (see `resolve_stages`) so a bad stage fails validation of the whole config.

`derived` round-trips: validating a dump of a resolved config drops the listed values first and derives
them again, so `with_overrides({"algorithm.algorithm_type": "sft"})` re-derives the loss functions
instead of keeping grpo's.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError, model_validator

from schemas import support_check
from schemas.base import ALIAS, SECTIONS, STAGE_CHAIN, ConfigRuleError
from schemas.errors import error_items
from schemas.experiment_fields import ExperimentFields
from schemas.explorer import ENGINE_VARIANTS
from schemas.overrides import UnknownSettingError, check_path, set_path
from schemas.rules import apply_rules
from schemas.stage_kind import stage_kind
from schemas.trainer import TRAINER_VARIANTS
from schemas.trinity.aliases import expand_override

# Switching a backend drops the settings the new one does not have: {discriminator path: (section, variants)}
DISCRIMINATORS = {
    "trainer.trainer_type": ("trainer", TRAINER_VARIANTS),
    "explorer.rollout_model.engine_type": ("explorer.rollout_model", ENGINE_VARIANTS),
}


class ExperimentConfig(ExperimentFields):
    """A whole RFT experiment (Trinity-RFT's config, typed). See the module docstring for resolution."""

    @model_validator(mode="after")
    def _resolve(self) -> ExperimentConfig:
        self._check_name()
        self.warnings = []
        apply_rules(self)
        if self.stages:
            self.resolve_stages()  # raises naming `stages.<i>...` paths
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> ExperimentConfig:
        """A new config with `{dotted.path: value}` applied to what the user set, then re-validated.

        Derived values are derived again (override `algorithm.algorithm_type` and the preset follows);
        Trinity's alias paths (`model.tinker.enable`) are expanded; switching a backend
        (`trainer.trainer_type`, `explorer.rollout_model.engine_type`) drops the settings the new one does
        not have (noted in `derived`); an unknown path raises `UnknownSettingError` naming it.
        """
        data = self.user_data()
        expanded: dict[str, Any] = {}
        for path, value in overrides.items():
            if path.split(".")[0] in ("derived", "warnings"):
                raise UnknownSettingError(f"unknown setting {path!r}: {path.split('.')[0]} is an output, not a setting")
            expanded |= expand_override(path, value)
        for path, value in expanded.items():
            check_path(ExperimentConfig, path)
            set_path(data, path, value)
            if "derived" in data:
                data["derived"].pop(path, None)
            if path in DISCRIMINATORS:
                _drop_foreign_settings(data, path, value)
        return ExperimentConfig.model_validate(data)

    def for_flow_run(self, flow_run_name: str) -> ExperimentConfig:
        """The experiment of one flow run of a nightly deployment (name_per_flow_run): "{name}-{flow run name}"."""
        return self.with_overrides({"name": f"{self.name}-{flow_run_name}"})

    def resolve_stages(self) -> list[ExperimentConfig]:
        """One complete, validated config per stage (a config without stages is its own single stage).

        Merge rule (Trinity's): a stage starts from what the base config sets and *replaces every whole
        section it sets* — fields of that section the stage leaves out take schema defaults, not the base's.
        `mode` is replaced when the stage gives it. The stage's `name` is "{base name}/{stage_name}", so its
        experiment_dir is {checkpoint_root_dir}/{project}/{name}/{stage_name}.

        Model chaining: a stage after a training stage (mode both/train/colocate) starts from that stage's
        final model unless its own `model` section sets `model_path`: model_path becomes
        "{previous stage experiment_dir}/final/huggingface" (`final_model_dir`), the folder the runtime
        writes at the end of every training stage. Chained values are listed in `derived`. A Tinker stage
        after a Tinker stage also keeps its `trainer.base_model` and continues from its final Tinker state
        (the tinker_state.json beside that folder); Tinker and other trainers do not chain.
        """
        if not self.stages:
            return [self.model_copy(deep=True)]
        base = self.user_data()
        base.pop("stages", None)
        base.pop("derived", None)
        configs: list[ExperimentConfig] = []
        problems: list[tuple[str, str]] = []
        last_trained: ExperimentConfig | None = None
        last_trained_name = ""
        for i, stage in enumerate(self.stages):
            data = copy.deepcopy(base)
            for section in SECTIONS:
                value = getattr(stage, section)
                if value is not None:
                    data[section] = value.user_data() if hasattr(value, "user_data") else value.model_dump(
                        mode="json", exclude_unset=True)
            if stage.mode is not None:
                data["mode"] = stage.mode
            data["name"] = f"{self.name}/{stage.stage_name}"
            chain = {"name": f"{STAGE_CHAIN}'{self.name}/' + stage_name"}
            names_own_model = stage.model is not None and stage.model.is_set("model_path")
            if last_trained is not None and not names_own_model:
                data.setdefault("model", {})["model_path"] = str(last_trained.final_model_dir)
                chain["model.model_path"] = f"{STAGE_CHAIN}final model of stage {last_trained_name!r}"
                trainer = data.get("trainer")
                variant = TRAINER_VARIANTS.get(trainer.get("trainer_type")) if isinstance(trainer, dict) else None
                if variant is not None:  # what this stage's trainer takes over from the stage it continues
                    for key, (value, why) in variant.carried_from(trainer, last_trained.trainer).items():
                        trainer[key] = value
                        chain[f"trainer.{key}"] = f"{STAGE_CHAIN}{why} {last_trained_name!r}"
            if last_trained is not None and not names_own_model and last_trained.trainer.save_hf_checkpoint == "never":
                problems.append((f"stages.{i}.model.model_path",
                                 f"[stage {stage.stage_name!r}] would start from the final model of stage "
                                 f"{last_trained_name!r}, whose trainer.save_hf_checkpoint 'never' writes no Hugging "
                                 "Face folder; set this stage's model.model_path, or save_hf_checkpoint 'last'"))
            data["derived"] = chain
            try:
                with support_check.path_prefix(f"stages.{i}."):
                    resolved = ExperimentConfig.model_validate(data)
            except ValidationError as exc:
                problems.extend(_prefixed(exc, f"stages.{i}", stage.stage_name))
                continue
            configs.append(resolved)
            chained, trains = last_trained is not None and not names_own_model, stage_kind(resolved).trains
            if chained and trains and resolved.trainer.WEIGHTS != last_trained.trainer.WEIGHTS:
                problems.append((f"stages.{i}.trainer.trainer_type", (
                    f"[stage {stage.stage_name!r}] {resolved.trainer.trainer_type!r} cannot continue from stage "
                    f"{last_trained_name!r} ({last_trained.trainer.trainer_type!r}): a stage starts from the previous stage's "
                    f"weights only where they live ({last_trained.trainer.WEIGHTS} weights there, "
                    f"{resolved.trainer.WEIGHTS} here; a Tinker stage's stay on the Tinker server); give this stage "
                    "its own model.model_path, or use one kind of trainer for every training stage")))
            if trains:
                last_trained, last_trained_name = resolved, stage.stage_name
        if problems:
            raise ConfigRuleError(problems)
        return configs


def _drop_foreign_settings(data: dict[str, Any], path: str, kind: Any) -> None:
    """After `path` switched a section's backend to `kind`: let the new variant adjust the rest of the
    config (`switched_to`), then drop that section's settings `kind` lacks."""
    section_path, variants = DISCRIMINATORS[path]
    variant = variants.get(kind) if isinstance(kind, str) else None
    if variant is None:
        return  # an unknown kind: validation names it
    variant.switched_to(data)
    section: Any = data
    for part in section_path.split("."):
        section = section.get(part) if isinstance(section, dict) else None
    if not isinstance(section, dict):
        return
    for key in [k for k in section if k not in variant.model_fields]:
        section.pop(key)
        data.setdefault("derived", {})[f"{section_path}.{key}"] = f"{ALIAS}dropped: not a setting of {path.rsplit('.', 1)[-1]} {kind!r}"


def _prefixed(exc: ValidationError, prefix: str, stage_name: str) -> list[tuple[str, str]]:
    return [(f"{prefix}.{path}", f"[stage {stage_name!r}] {msg}") for path, msg in error_items(exc)]
