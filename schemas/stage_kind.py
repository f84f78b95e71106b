"""What kind of stage a config is, from its `mode` and its algorithm preset: the one place that reads
`mode` for a fact. Rules, flows, the schedule and the pre-flight ask `stage_kind(config)` which sides
run, whether it explores, trains, learns from a dataset, keeps the usage ledger, which flow runs it
and which tracking run it logs to; none of them compares `mode` itself.

    mode      explores  trains  sides              flow (flows/rft.py)       tracking role
    both      yes       yes     explorer, trainer  both: flows/rl.py         main
    colocate  yes       yes     explorer, trainer  colocate: rl, in turns    main
    explore   yes       -       explorer           explore                   explorer
    train     -         yes     trainer            train, or sft             main
    bench     -         -       explorer           bench                     bench
    serve     -         -       explorer           serve                     serve

A `train` stage whose algorithm preset has no rollout (sft, dpo) learns from a dataset: the SFT flow,
with engines of its own when it has eval tasksets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from schemas.algorithm_registry import ALGORITHM_PRESETS

if TYPE_CHECKING:
    from schemas.sections import Sections

Side = Literal["explorer", "trainer"]
BOTH: tuple[Side, ...] = ("explorer", "trainer")
_EXPLORING = frozenset({"both", "explore", "colocate"})  # rollout engines on the training taskset
_TRAINING = frozenset({"both", "train", "colocate"})  # a trainer that steps (and writes the final model)
# The sides each mode runs in its process (what it locks, starts and releases); bench and serve only
# evaluate or serve on engines.
_SIDES: dict[str, tuple[Side, ...]] = {"both": BOTH, "colocate": BOTH, "explore": ("explorer",),
                                       "train": ("trainer",), "bench": ("explorer",), "serve": ("explorer",)}
# The tracking run each mode logs to ("main" otherwise): an explore run beside a train run logs apart.
_TRACKING_ROLES = {"explore": "explorer", "bench": "bench", "serve": "serve"}
SFT_FLOW = "sft"  # the flow of a stage that learns from a dataset (flows/sft_warmup.py)


@dataclass(frozen=True)
class StageKind:
    explores: bool  # runs rollout engines on the training taskset (both, colocate, explore)
    trains: bool  # runs a trainer that steps: both, colocate, train (SFT/DPO included)
    from_dataset: bool  # a train stage whose algorithm has no rollout (sft, dpo): it reads a dataset's rows
    rl: bool  # the trainer learns from rollouts (experiences), not from a dataset
    exchanges_weights: bool  # its explorer and trainer trade experiences and weights (not SFT, bench, serve)
    shares_devices: bool  # colocate: the engines and the trainer take turns on the same devices
    sides: tuple[Side, ...]  # what this stage runs in its process: explorer (the engines), trainer, or both
    flow: str  # the key of flows/rft.py:MODE_FLOWS that runs it: the mode, or "sft"
    tracking_role: str  # the tracking run it logs to (tracking.fail_open_run marks it failed)

    @property
    def together(self) -> bool:
        """Explorer and trainer in this one run (both, colocate): experiences stream, weights sync directly;
        otherwise they run apart and weights move only through checkpoints."""
        return self.explores and self.trains

    @property
    def keeps_ledger(self) -> bool:
        """Every stage that trains counts its steps' usage and stops at the budget (flows/rl.py, trainer.py,
        sft_warmup.py); an explore run stops when its trainer does, bench and serve run to the end."""
        return self.trains


def stage_kind(config: Sections) -> StageKind:
    """The kind of stage `config` is. Safe before validation finished: an unknown algorithm_type (an error
    of its own, schemas/rules.py) makes a train stage neither RL nor from a dataset."""
    mode = config.mode
    preset = ALGORITHM_PRESETS.get(config.algorithm.algorithm_type)
    has_rollout = None if preset is None else preset.needs_rollout
    trains = mode in _TRAINING
    from_dataset = mode == "train" and has_rollout is False
    sides = _SIDES[mode]
    if from_dataset and config.buffer.explorer_input.eval_tasksets:
        sides = BOTH  # the SFT (DPO) stage evaluates on engines of its own
    return StageKind(
        explores=mode in _EXPLORING,
        trains=trains,
        from_dataset=from_dataset,
        # both and colocate stream rollouts to their trainer; a train stage reads the buffer of an explore run
        rl=trains and (mode != "train" or has_rollout is True),
        # an sft/dpo preset trades nothing in any mode (its data is a dataset)
        exchanges_weights=(mode in _EXPLORING or trains) and has_rollout is not False,
        shares_devices=mode == "colocate",
        sides=sides,
        flow=SFT_FLOW if from_dataset else mode,
        tracking_role=_TRACKING_ROLES.get(mode, "main"),
    )
