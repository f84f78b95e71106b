"""docs/settings.md, written whole: each section of `ExperimentConfig` as a table of its settings (type, default, the
field's description) and what the runtime does with each, as `schemas.support_check.entry_for` and each trainer's own
entries (`schemas.support_check.trainer_entry`) say; after the algorithm's table, its presets and its functions."""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from algorithms.registry import NoArgs
from deployments.reference_docs.markdown import (
    COMMAND,
    ROOT,
    built_module,
    cell,
    code,
    default_text,
    first_paragraph,
    is_model,
    merged,
    needs,
    preset_needs,
    slug,
    table,
    tag_of,
    trainer_departures,
    type_text,
    union_members,
    unwrap,
    value_text,
    verdict,
)
from schemas import ExperimentConfig, StageConfig, support_check
from schemas.algorithm import AlgorithmConfig
from schemas.algorithm_registry import ALGORITHM_PRESETS, BUILT, FUNCTION_REGISTRIES
from schemas.base import SECTIONS
from schemas.trinity import names
from schemas.trinity.algorithms import REFUSED_TYPES

SETTINGS_PAGE = ROOT / "docs" / "settings.md"


# ============================================================================= the schema, as tables
Shape = Literal["leaf", "model", "union", "list", "dict"]


def shape(annotation: Any) -> tuple[Shape, list[type[BaseModel]]]:
    """What a field holds: a value, a section, a tagged union of sections, or a list / mapping of sections."""
    annotation = unwrap(annotation)
    args = [a for a in (union_members(annotation) or [annotation]) if a is not type(None)]
    models = [a for a in args if is_model(a)]
    if len(models) > 1:
        return "union", models
    if models:
        return "model", models
    for a in args:
        origin = typing.get_origin(a)
        inner = typing.get_args(a)
        if origin is list:
            item = unwrap(inner[0])
            items = [m for m in (union_members(item) or [item]) if is_model(m)]
            if items:
                return "list", items
        if origin is dict and is_model(inner[1]):
            return "dict", [inner[1]]
    return "leaf", []


@dataclass
class Block:
    """One table of the settings page: a section (or shared model, or variant) at one or more places."""

    title: str
    model: type[BaseModel]
    places: list[tuple[str, str]]  # (label, schema key prefix ending in ".")
    intro: str = ""
    fields: list[str] | None = None  # None: all of the model's (its tag aside)
    level: int = 3
    rows: list[list[str]] = field(default_factory=list)


def _collect_places(model: type[BaseModel], prefix: str, out: dict[type[BaseModel], list[str]]) -> None:
    for name, info in model.model_fields.items():
        kind, models = shape(info.annotation)
        if model is ExperimentConfig and name == "stages":
            continue
        suffix = {"model": "", "list": "[]", "dict": "[]"}.get(kind)
        if suffix is not None and len(models) == 1:
            place = f"{prefix}{name}{suffix}"
            out.setdefault(models[0], []).append(place)
            _collect_places(models[0], place + ".", out)
        elif models:  # a tagged union (or a list of one): each variant
            for variant in models:
                _collect_places(variant, f"{prefix}{name}{'[]' if kind == 'list' else ''}[{tag_of(variant)}].", out)


def shared_models() -> dict[type[BaseModel], list[str]]:
    """Section models found at more than one place (task sets, datasets, the critic), not inside another such."""
    places: dict[type[BaseModel], list[str]] = {}
    _collect_places(ExperimentConfig, "", places)
    shared = {m: p for m, p in places.items() if len(p) > 1}
    return {m: p for m, p in shared.items()
            if not all(any(x.startswith(q + ".") for o, op in shared.items() if o is not m for q in op) for x in p)}


class SettingsPage:
    def __init__(self) -> None:
        self.shared = shared_models()
        self.blocks: list[Block] = []
        self.queued: set[object] = set()

    # ---------------------------------------------------------------- rows of one block
    def fill(self, block: Block) -> None:
        self._rows(block, block.model, "", block.fields)

    def _rows(self, block: Block, model: type[BaseModel], rel: str, only: list[str] | None = None) -> None:
        tag = getattr(model, "TAG", None)
        for name, info in model.model_fields.items():
            if name == tag or (only is not None and name not in only):
                continue
            if model is StageConfig and name in SECTIONS:
                continue
            setting = f"{rel}{name}"
            kind, models = shape(info.annotation)
            desc = cell(info.description or "")
            extra = trainer_departures if block.places[0][1].startswith("algorithm.") else None
            if model is AlgorithmConfig and name.removesuffix("_args") in FUNCTION_REGISTRIES:
                fn = name.removesuffix("_args")
                link = f"[{fn}](#{slug(f'`algorithm.{fn}`')})"
                what = merged(block.places, setting) if name == fn else f"the chosen function's: {link}"
                block.rows.append([code(setting), cell(type_text(info.annotation)), default_text(info), desc, what])
                continue
            if model is AlgorithmConfig and name == "algorithm_type":
                what = merged(block.places, setting) + f"<br>the presets: [below](#{slug(PRESETS_TITLE)})"
                block.rows.append([code(setting), cell(type_text(info.annotation)), default_text(info), desc, what])
                continue
            if kind == "leaf" or (kind == "dict" and model is ExperimentConfig):
                block.rows.append([code(setting), cell(type_text(info.annotation)), default_text(info), desc,
                                   self._leaf_verdict(block, setting, info, extra)])
            elif kind == "model" and models[0] not in self.shared:
                section_verdict = merged(block.places, setting, extra, sections=True)
                if section_verdict:
                    block.rows.append([code(setting), "section", "", desc, section_verdict])
                self._rows(block, models[0], f"{setting}.")
            elif model is ExperimentConfig and name == "stages":
                title = STAGES_TITLE
                block.rows.append([code(setting), "list of stages", default_text(info), desc, f"[below](#{slug(title)})"])
                self._queue(("stages",), lambda: Block(title, StageConfig, [("stage", "stages[].")], level=2, intro=(
                    "Each stage also takes whole sections (`algorithm`, `model`, `cluster`, `buffer`, `explorer`, "
                    "`trainer`, `synchronizer`, `monitor`): each replaces the base config's section of that name, and "
                    "the stage is validated as a whole config (the tables above apply to it).")))
            else:
                title, what = self._sub(block, setting, kind, models)
                block.rows.append([code(setting), cell(type_text(info.annotation)), default_text(info), desc,
                                   f"{what}<br>its settings: [below](#{slug(title)})" if what else
                                   f"its settings: [below](#{slug(title)})"])
        for key, why in getattr(model, "NOT_HERE", {}).items():  # keys it does not have (Trinity's), refused with why
            block.rows.append([code(f"{rel}{key}"), "not a setting here", "", "", f"**refused**: {cell(why)}"])

    def _leaf_verdict(self, block: Block, setting: str, info: FieldInfo,
                      extra: Callable[[str], list[str]] | None) -> str:
        text = merged(block.places, setting, extra)
        values = typing.get_args(unwrap(info.annotation)) if typing.get_origin(unwrap(info.annotation)) is Literal \
            else ()
        for value in values:  # a Literal value with an entry of its own
            keyed = [(label, p) for label, p in block.places
                     if (support_check.entry_for(f"{p}{setting}[{value}]") or ("",))[0] == f"{p}{setting}[{value}]"]
            if keyed:
                text += f"<br>{code(value)}: " + merged(keyed, f"{setting}[{value}]")
        return text

    def _sub(self, block: Block, setting: str, kind: Shape, models: list[type[BaseModel]]) -> tuple[str, str]:
        """Queue the block(s) of a section reached through a list, a mapping, a tagged union or a shared model;
        return the title of the first and what happens with the field itself."""
        holder = [(label, f"{p}{setting}") for label, p in block.places]
        items = "[]" if kind in ("list", "dict") else ""
        what = merged(block.places, setting, sections=True)
        if len(models) == 1:
            model = models[0]
            if model in self.shared:
                places = [p for p in self.shared[model] if not self._refused(p)]
                title = ", ".join(code(p) for p in places)
                self._queue(model, lambda: Block(title, model, [(p, p + ".") for p in places], intro=(
                    f"{cell(first_paragraph(model.__doc__))} The same settings at each of these places; where what "
                    "happens differs, the place is named.")))
            else:
                title = f"`{holder[0][1]}{items}`"
                self._queue(title, lambda: Block(title, model, [(lb, f"{k}{items}.") for lb, k in holder],
                                                 intro=cell(first_paragraph(model.__doc__))))
            return title, what
        # a tagged union: the settings every variant has, then each variant's own
        key = f"{holder[0][1]}{items}"
        tag = models[0].TAG  # type: ignore[attr-defined]
        variants = {tag_of(m): m for m in models}
        common = [n for n in models[0].model_fields if n != tag and all(n in m.model_fields for m in models)]
        live = [(t, f"{key}[{t}].") for t in variants if not self._refused(f"{key}[{t}]")]
        first = f"`{key}`: every {tag}"
        self._queue(first, lambda: Block(first, models[0], live, fields=common, intro=(
            f"One variant per `{tag}` ({', '.join(code(t) for t in variants)}): here the settings they all have, then "
            "each one's own.")))
        for name, model in variants.items():
            own = [n for n in model.model_fields if n not in common and n != tag]
            title = f"`{key}`: {tag} {name}"
            if own and not self._refused(f"{key}[{name}]"):
                self._queue(title, lambda t=title, m=model, o=own, g=name: Block(
                    t, m, [(g, f"{key}[{g}].")], fields=o, intro=cell(first_paragraph(m.__doc__))))
        what = "<br>".join(f"{code(t)}: {verdict(f'{key}[{t}]')}" for t in variants)
        return first, what

    @staticmethod
    def _refused(key: str) -> bool:
        found = support_check.entry_for(key)
        return bool(found and found[0] == key and found[1].covers)

    def _queue(self, token: object, make: Callable[[], Block]) -> None:
        if token not in self.queued:
            self.queued.add(token)
            self.blocks.append(make())

    # ---------------------------------------------------------------- the page
    def render(self) -> str:
        fields = ExperimentConfig.model_fields
        top = [n for n, info in fields.items() if shape(info.annotation)[0] == "leaf"] + ["stages"]
        heads = [Block("The experiment", ExperimentConfig, [("", "")], fields=top, level=2,
                       intro="The top level of a config: its name, where it writes, its mode and its stages.")]
        for name, info in fields.items():
            if name in top:
                continue
            kind, models = shape(info.annotation)
            desc = cell(info.description or "")
            heads.append(Block(f"`{name}`", models[0], [(name, f"{name}.")], level=2, intro=desc) if kind == "model"
                         else Block(f"`{name}`", ExperimentConfig, [("", "")], fields=[name], level=2, intro=desc))
        head_row = ["setting", "type", "default", "what it does", "what happens"]
        out = [*INTRO, "", "Sections: " + ", ".join(f"[{b.title}](#{slug(b.title)})" for b in heads)
               + f", [`stages[]`](#{slug(STAGES_TITLE)}).", ""]
        stages: list[str] = []
        for head in heads:
            self.blocks = []
            self.fill(head)
            done = 0
            while done < len(self.blocks):
                self.fill(self.blocks[done])
                done += 1
            for block in [head, *self.blocks]:
                lines = [f"{'#' * block.level} {block.title}", "", *([block.intro, ""] if block.intro else []),
                         *table(head_row, block.rows), ""]
                if block.title == STAGES_TITLE:
                    stages = lines
                    continue
                out += lines
                if block is head and head.model is AlgorithmConfig:
                    out += [*presets_section(), "", *functions_section()]
        out += stages
        return "\n".join(out).rstrip("\n") + "\n"


STAGES_TITLE = "`stages[]`"
INTRO = [
    "# What each setting does",
    "",
    f"Generated by `{COMMAND}` from the schema (`schemas/experiment.py` and its sections) and each settings class's "
    "`SETTINGS` (collected by `schemas/support_check.py`); do not edit: `tests/test_reference_docs.py` fails when this "
    "page differs from what the generator writes.",
    "",
    "Every setting is honoured, refused or warned. A refused value fails `rft validate` naming the field and why; a "
    "warned one (only where ignoring it is harmless) is listed by `rft validate` and `rft import-trinity`, in the "
    "Prefect run log and in the MLflow run's `warnings` param; both are in the `SETTINGS` of the class that holds "
    "the field (a backend's: `schemas/trainer.py`, `schemas/explorer.py`). A setting *read by the runtime* has no list of its "
    "own: the whole test run (`scripts/test.sh --ci`, what CI runs) records every setting the runtime reads in its real "
    "runs, in every process, and fails for one no run read (`tests/settings_reads.py`). A value the schema fills in "
    "itself (a preset's function, a derived batch size) is listed under `derived` by `rft validate` ([cli.md](cli.md)).",
    "",
    "How to read the last column: *built in* names the module of a function (a function's arguments are read by the "
    "runtime as the other settings are, each key of `*_args` recorded by the same whole run); *becomes* a setting validation "
    "turns it into; *a rule of* where its only meaning is a check; *each trainer implements it*: each trainer backend "
    "reads it in its own modules, unless a line *on `<trainer>`* says otherwise; **refused** and **warned** apply to a "
    "value other than the default (in some cases: only where the reason says); *with `x`*: refused or warned with the "
    "section or variant `x` above it; *not a setting here*: a key the section does not have (Trinity's, or a sibling "
    "section's), refused whatever its value with the reason its class gives (`NOT_HERE`). A table that covers several "
    "places (the backends' shared settings, task sets, datasets) names the places where that differs. Which trainer "
    "runs each preset and function: [algorithm-matrix.md](algorithm-matrix.md). Adding a setting, a loss or a backend: "
    "[adding-a-loss.md](adding-a-loss.md), [adding-a-backend.md](adding-a-backend.md); Trinity-RFT's names: "
    "[trinity-parity.md](trinity-parity.md).",
]
PRESETS_TITLE = "`algorithm.algorithm_type`: the presets"
FUNCTIONS_TITLE = "The algorithm's functions"


# ============================================================================= the algorithm's presets and functions
PRESET_TESTS = "tests/test_presets.py"


def _preset_verdict(name: str) -> str:
    found = support_check.entry_for(f"algorithm.algorithm_type[{name}]")
    if found is None:  # not refused: tests/test_presets.py trains a step of it (and checks that)
        return f"trains (a step in {code(PRESET_TESTS)})"
    return verdict(f"algorithm.algorithm_type[{name}]")


def presets_section() -> list[str]:
    """The presets of algorithm_type: the functions each fills in, and what happens with it."""
    rows = []
    for name, preset in ALGORITHM_PRESETS.items():
        d = preset.defaults
        args = "; ".join(f"{k.removesuffix('_args')}: {value_text(v)}" for k, v in preset.args.items())
        declared = preset_needs(d)
        extra = [x for x in ("a dataset, no rollouts" if not preset.needs_rollout else "",
                             f"needs: {', '.join(declared)}" if declared else "",
                             "dynamic sampling" if preset.filter_groups else "", args, *preset.notes) if x]
        rows.append([code(name), str(d.get("repeat_times", "")),
                     *(code(d[k]) for k in ("advantage_fn", "policy_loss_fn", "kl_loss_fn", "entropy_loss_fn",
                                            "sample_strategy")),
                     cell("; ".join(extra)), _preset_verdict(name)])
    refused = [[code(n), "", "", "", "", "", "", "Trinity-RFT's", f"**refused**: {cell(why)}"]
               for n, why in REFUSED_TYPES.items()]
    alias = [[code(n), "", "", "", "", "", "", "Trinity-RFT's other name", f"the preset {code(ours)}"]
             for n, ours in names.ALGORITHM_TYPE_ALIASES.items()]
    return [f"### {PRESETS_TITLE}", "",
            "A preset fills in the functions the config leaves unset (each listed under `derived`); a function or "
            "argument the config sets wins. Per trainer backend: "
            "[algorithm-matrix.md](algorithm-matrix.md#presets-algorithmalgorithm_type).", "",
            *table(["preset", "repeat_times", "advantage_fn", "policy_loss_fn", "kl_loss_fn", "entropy_loss_fn",
                    "sample_strategy", "also", "what happens"], [*rows, *refused, *alias])]


def _function_doc(kind: str, name: str) -> str:
    registry = BUILT.get(kind)
    if registry is not None and name in registry and registry[name].__doc__:
        return first_paragraph(registry[name].__doc__)
    args = FUNCTION_REGISTRIES[kind][name]
    return "" if args is NoArgs else first_paragraph(args.__doc__)


def _function_verdict(kind: str, name: str) -> str:
    """What happens with a function a config names: a built one with nothing more to say is its module."""
    key = f"algorithm.{kind}[{name}]"
    if support_check.entry_for(key) is None and (module := built_module(kind, name)):
        return f"built in {code(module)}"
    return verdict(key)


def functions_section() -> list[str]:
    """Each function registry: its functions (grouped where they share arguments and verdicts) and their arguments."""
    out = [f"### {FUNCTIONS_TITLE}", "",
           "`algorithm.<kind>` names one function of its registry; `algorithm.<kind>_args` holds its arguments (an "
           "unknown one is an error naming it; each one left out takes the default below, listed under `derived`). "
           "Trinity-RFT's names that are not built are here too, each refused with why. Which trainer runs each: "
           "[algorithm-matrix.md](algorithm-matrix.md).", ""]
    for kind, registry in FUNCTION_REGISTRIES.items():
        groups: dict[tuple, list[str]] = {}
        for name, args in registry.items():
            key = f"algorithm.{kind}[{name}]"
            arg_verdicts = tuple(
                "<br>".join([verdict(f"{key}.{a}"), *trainer_departures(f"{key}.{a}")]) for a in args.model_fields)
            what = "<br>".join([_function_verdict(kind, name), *trainer_departures(key)])
            sig = (args, _function_doc(kind, name), what, arg_verdicts, tuple(needs(kind, name)))
            groups.setdefault(sig, []).append(name)
        rows = []
        for (args, doc, what, arg_verdicts, declared), members in groups.items():
            doc = cell(doc) + (f" Needs: {', '.join(declared)}." if declared else "")
            rows.append([", ".join(code(m) for m in members), "", "", doc, what])
            for (arg, info), arg_what in zip(args.model_fields.items(), arg_verdicts, strict=True):
                rows.append([f"↳ {code(arg)}", cell(type_text(info.annotation)), default_text(info),
                             cell(info.description or ""), arg_what])
        out += [f"#### `algorithm.{kind}`", "", *table(["function / argument", "type", "default", "what it does",
                                                        "what happens"], rows), ""]
    return out


def render_settings() -> str:
    return SettingsPage().render()
