"""The functions `algorithm.*_fn` may name, with the model of each one's arguments, and the presets of
`algorithm_type` (names and defaults as in Trinity-RFT).

The functions `algorithms/` implements are registered there with their arguments models; the
registries here are derived from those (a new loss is one module, docs/adding-a-loss.md), plus the
names Trinity knows that are not built (their arguments are still checked; a `SETTINGS` entry refuses
them) and each kind's "none". `algorithm.<kind>_fn_args` is validated against the chosen function's
model: an unknown key is an error naming `algorithm.<kind>_fn_args.<key>`, and every argument the user
left out is filled in with its default (listed in `ExperimentConfig.derived`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from algorithms import ADVANTAGE_FNS, ENTROPY_LOSS_FNS, KL_LOSS_FNS, POLICY_LOSS_FNS
from algorithms.registry import Args, Need, Registry
from schemas.base import Entry, honoured, refused, validated
from schemas.trinity.algorithms import NOT_BUILT_ARGS as TRINITY_NOT_BUILT_ARGS
from schemas.trinity.algorithms import NOT_BUILT_FUNCTIONS as TRINITY_NOT_BUILT_FUNCTIONS

# ----------------------------------------------------------------------------- functions Trinity names, not built
# Their names, Trinity's arguments of each (checked like the others', so an imported Trinity config reads the same)
# and why each is refused: schemas/trinity/algorithms.py (a `SETTINGS` entry refuses each).
NOT_BUILT: dict[str, dict[str, type[Args]]] = TRINITY_NOT_BUILT_ARGS


# ----------------------------------------------------------------------------- "off", and the sampling strategies
class NoKLArgs(Args):
    """No KL term."""

    kl_coef: float = Field(0.0, description="Must be 0: there is no KL term.")


class NoEntropyArgs(Args):
    """No entropy term."""

    entropy_coef: float = Field(0.0, description="Must be 0: there is no entropy term.")


class SampleArgs(Args):
    """Take the oldest untrained experiences, leaving out those sampled with weights that are too old."""

    max_staleness: int | None = Field(
        None, ge=0, description="Skip (and count) experiences sampled with weights more than this many versions "
        "older than the trainer's; None: train on every experience."
    )


class PrioritySampleArgs(SampleArgs):
    """Take the untrained experiences with the highest priority first (each is still trained once)."""

    priority_fn: Literal["newest", "largest_advantage"] = Field(
        "newest", description="newest: sampled with the newest weights first (the least stale); largest_advantage: "
        "the largest |advantage| first (the strongest learning signal)."
    )


class MixSampleArgs(Args):
    """Add expert (SFT) rows to each RL batch (the mix family's losses train on both; docs/mix.md)."""

    expert_data_ratio: float = Field(
        0.5, ge=0, lt=1, description="Fraction of each train batch that is expert rows: the batch is the step's "
        "train_batch_size sampled experiences plus round(ratio / (1 − ratio) × train_batch_size) expert rows.")
    sft_dataset_name: str = Field(
        "sft_dataset", min_length=1, description="The buffer.trainer_input.auxiliary_buffers entry the expert rows "
        "are read from (round and round, in order).")


# The trainer's sampling strategies (tasks/train.py, buffer/experience_store.py).
SAMPLE_STRATEGIES: dict[str, type[Args]] = {
    "default": SampleArgs,  # the oldest untrained experiences first
    "warmup": SampleArgs,  # Trinity's name; its SFT warm-up data is a stage here, so it is the default order
    "staleness_control": SampleArgs,  # Trinity's name of default with max_staleness: the same here
    "priority": PrioritySampleArgs,
    "mix": MixSampleArgs,
}
# What a strategy needs of the trainer (algorithms/registry.py `Need`): mix hands it expert rows beside the sampled ones.
SAMPLE_STRATEGY_NEEDS: dict[str, frozenset[Need]] = {"mix": frozenset({"expert_rows"})}


class Joined(Mapping[str, type[Args]]):
    """{**a, **b, ...} read live: a function registered after this module is imported (a test's own) is in it."""

    def __init__(self, *maps: Mapping[str, type[Args]]) -> None:
        self.maps = maps

    def __getitem__(self, name: str) -> type[Args]:
        for one in reversed(self.maps):
            if name in one:
                return one[name]
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(name for one in self.maps for name in one))

    def __len__(self) -> int:
        return len(dict.fromkeys(name for one in self.maps for name in one))


KL_FNS: Mapping[str, type[Args]] = Joined({"none": NoKLArgs}, KL_LOSS_FNS.args)

# Which registry checks each `<name>` / `<name>_args` pair of AlgorithmConfig: {name: arguments model}.
FUNCTION_REGISTRIES: dict[str, Mapping[str, type[Args]]] = {
    "sample_strategy": SAMPLE_STRATEGIES,
    "policy_loss_fn": Joined(POLICY_LOSS_FNS.args, NOT_BUILT["policy_loss_fn"]),
    "advantage_fn": Joined(ADVANTAGE_FNS.args, NOT_BUILT["advantage_fn"]),
    "kl_loss_fn": KL_FNS,
    "kl_penalty_fn": KL_FNS,
    "entropy_loss_fn": Joined({"none": NoEntropyArgs}, ENTROPY_LOSS_FNS.args, NOT_BUILT["entropy_loss_fn"]),
}
# The functions of each kind that algorithms/ implements (the others are Trinity's names, refused).
BUILT: dict[str, Registry] = {
    "policy_loss_fn": POLICY_LOSS_FNS,
    "advantage_fn": ADVANTAGE_FNS,
    "kl_loss_fn": KL_LOSS_FNS,
    "kl_penalty_fn": KL_LOSS_FNS,  # the reward's KL penalty takes the same estimators
    "entropy_loss_fn": ENTROPY_LOSS_FNS,
}


@dataclass(frozen=True)
class AlgorithmPreset:
    """What `algorithm_type` implies. Values fill only the fields the user left unset."""

    defaults: dict[str, object]
    needs_rollout: bool = True  # False: learns from a dataset only (sft, dpo)
    filter_groups: bool = False  # dynamic sampling on (algorithm.filter_groups.enable left unset)
    # Arguments of the preset's functions, filled in under those the user gave ({"policy_loss_fn_args": {...}});
    # applied only while the function is the preset's own.
    args: dict[str, dict[str, object]] = field(default_factory=dict)
    notes: tuple[str, ...] = field(default_factory=tuple)


_BASE = {
    "sample_strategy": "warmup",
    "policy_loss_fn": "ppo",
    "advantage_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "k2",
    "entropy_loss_fn": "default",
}


def _preset(**overrides: object) -> dict[str, object]:
    return {**_BASE, **overrides}


ALGORITHM_PRESETS: dict[str, AlgorithmPreset] = {
    "sft": AlgorithmPreset(
        _preset(sample_strategy="default", policy_loss_fn="sft", advantage_fn="none", kl_loss_fn="none",
                entropy_loss_fn="none", repeat_times=1),
        needs_rollout=False,
    ),
    "raft": AlgorithmPreset(
        _preset(sample_strategy="default", policy_loss_fn="sft", advantage_fn="none", kl_loss_fn="none",
                entropy_loss_fn="none", repeat_times=1),
    ),
    # GAE over a critic's values (algorithms/advantage/gae.py): trainers that hold a critic (TrainerBase.CANNOT)
    "ppo": AlgorithmPreset(_preset(repeat_times=1)),
    "grpo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo")),
    "gspo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo", policy_loss_fn="gspo", kl_loss_fn="none")),
    "rloo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="rloo")),
    "reinforceplusplus": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="reinforceplusplus")),
    "opmd": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="opmd", policy_loss_fn="opmd")),
    "asymre": AlgorithmPreset(
        _preset(repeat_times=2, advantage_fn="asymre", policy_loss_fn="opmd", kl_loss_fn="none",
                entropy_loss_fn="none")
    ),
    "topr": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="reinforce", policy_loss_fn="topr")),
    "sapo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo", policy_loss_fn="sapo")),
    "sppo": AlgorithmPreset(
        _preset(repeat_times=2, advantage_fn="opmd", policy_loss_fn="sppo", kl_loss_fn="none", entropy_loss_fn="none")
    ),
    "rec": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="rec", policy_loss_fn="rec")),
    "multi_step_grpo": AlgorithmPreset(_preset(repeat_times=8, advantage_fn="step_wise_grpo")),
    # GiGPO (Trinity's GiGPOAlgorithm): episode- plus anchor-state step-level advantages of multi-turn episodes
    # (algorithms/advantage/gigpo.py); a workflow that records each step's state (schemas/rules.py).
    "gigpo": AlgorithmPreset(
        _preset(repeat_times=8, advantage_fn="gigpo"),
        args={"policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.2, "loss_agg_mode": "token-mean"}},
    ),
    # The mix family: expert SFT rows added to each RL batch (algorithms/policy_loss/mix.py, docs/mix.md).
    "mix": AlgorithmPreset(_preset(repeat_times=8, advantage_fn="grpo", policy_loss_fn="mix", sample_strategy="mix",
                                   entropy_loss_fn="mix")),
    "mix_chord": AlgorithmPreset(_preset(repeat_times=8, advantage_fn="grpo", policy_loss_fn="mix_chord",
                                         sample_strategy="mix", entropy_loss_fn="mix")),
    "cispo": AlgorithmPreset(_preset(repeat_times=2, advantage_fn="grpo", policy_loss_fn="cispo")),
    # Trinity's DAPO preset (its DAPOAlgorithm): GRPO's advantage and the ppo loss, no reference model and no KL term,
    # 16 responses a task; its clip-higher, token-level loss and dynamic sampling are set in the config (Trinity's
    # dapo_math example: policy_loss_fn_args and the dapo_dynamic_sampling operator, here algorithm.filter_groups).
    "dapo": AlgorithmPreset(_preset(repeat_times=16, advantage_fn="grpo", kl_loss_fn="none")),
    # Ours (the `dapo` of this project before Trinity had one; the arith recipe's): DAPO with its parts in the preset,
    # clip-higher (ε_low 0.2, ε_high 0.28), token-level aggregation, no KL term, dynamic sampling (docs/dapo.md).
    "dapo_full": AlgorithmPreset(
        _preset(repeat_times=2, advantage_fn="grpo", kl_loss_fn="none"), filter_groups=True,
        args={"policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28, "loss_agg_mode": "token-mean"}},
    ),
    # M2PO (Trinity's M2POAlgorithm): GRPO's advantage, the m2po loss, no reference model, no KL or entropy term.
    "m2po": AlgorithmPreset(_preset(repeat_times=8, advantage_fn="grpo", policy_loss_fn="m2po", kl_loss_fn="none",
                                    entropy_loss_fn="none")),
    # DPO on preference pairs of a dataset (mode train); Trinity's defaults, its KL term (k2) included.
    "dpo": AlgorithmPreset(
        _preset(sample_strategy="default", policy_loss_fn="dpo", advantage_fn="none", repeat_times=1),
        needs_rollout=False,
    ),
    "on_policy_distill": AlgorithmPreset(
        _preset(repeat_times=1, advantage_fn="on_policy_distill", policy_loss_fn="importance_sampling",
                kl_loss_fn="none", entropy_loss_fn="none", sample_strategy="default"),
    ),
    "jsd": AlgorithmPreset(
        _preset(repeat_times=8, advantage_fn="jsd", kl_loss_fn="none", entropy_loss_fn="none", sample_strategy="default"),
    ),
}


# ----------------------------------------------------------------------------- how the runtime treats them
# A function a config names runs, and each of its arguments is read where the function needs it: the suite's whole
# run records each key read (algorithms/registry.py FunctionArgs) and tests/settings_reads.py fails for one no run
# read; the entries here say the rest. The names Trinity knows that are not built are refused. Keys are below
# `algorithm` (AlgorithmConfig.SETTINGS holds them).
# Trinity adapts the coefficient of the reward's KL penalty only (its kl_loss_fn keeps kl_coef fixed).
ADAPTIVE_LOSS_KL = ("an adaptive coefficient applies to kl_penalty_fn (KL in the reward), as in Trinity; kl_loss_fn "
                    "takes a fixed kl_coef")
_FUNCTIONS: dict[str, dict[str, Entry]] = {
    "sample_strategy": {
        "warmup": honoured(note="the same as default: Trinity's warm-up data is not read here"),
        "staleness_control": honoured(note="Trinity's name: default with max_staleness"),
        "mix": honoured(note="the oldest untrained experiences, plus expert rows (tasks/expert.py)"),
    },
    # Trinity's names not built (schemas/trinity/algorithms.py), each refused with why
    **{fn: {name: refused(why) for name, why in names.items()}
       for fn, names in TRINITY_NOT_BUILT_FUNCTIONS.items() if fn != "entropy_loss_fn"},
    "kl_loss_fn": {"none": honoured(note="no KL term")},
    "entropy_loss_fn": {"none": honoured(note="no entropy term"),
                        **{name: refused(why)
                           for name, why in TRINITY_NOT_BUILT_FUNCTIONS["entropy_loss_fn"].items()}},
}
# Arguments with more to say than that they are read.
_ARGS: dict[str, Entry] = {
    "kl_loss_fn[none].kl_coef": validated(note="must be 0 with 'none'"),
    **{f"kl_loss_fn[*].{arg}": refused(ADAPTIVE_LOSS_KL) for arg in ("adaptive", "target_kl", "horizon")},
    "advantage_fn[step_wise_grpo].enable_step_norm": refused(
        "a multi-turn episode is one experience here (workflows/multi_turn.py): there are no per-step experiences "
        "to divide among"),
    "entropy_loss_fn[none].entropy_coef": validated(note="must be 0 with 'none'"),
}
FUNCTION_SETTINGS: dict[str, Entry] = {
    **{f"{fn}[{name}]": entry for fn, entries in _FUNCTIONS.items() for name, entry in entries.items()}, **_ARGS}
