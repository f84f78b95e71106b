"""The one schedule of explorer and trainer, from `synchronizer` and the stage's kind (schemas/stage_kind.py):
what a stage runs, whether its two sides take turns or overlap, which weights version each explore step
samples with, when the trainer publishes, and when either side waits for the other. Flows (flows/rl.py, explorer.py,
trainer.py) and the backends (a policy's resource plan and weight transport) ask it; nothing else
reads sync_style, sync_interval or sync_offset, and no backend reads `synchronizer` or `mode` itself.

Versions: version v is the weights after train step v (0: the initial model). Explore step k is
trained by train step k, which starts from version k-1, so its staleness is (k-1) - the version it
sampled with. With `sync_style: fixed` the explorer samples step k with exactly

    v(k) = sync_interval * floor((k - 1 - sync_offset) / sync_interval)   (0 while that is negative)

so staleness is at most sync_offset + sync_interval - 1, and exactly that in steady state; the trainer
publishes every sync_interval steps. `trainer_driven`: the trainer publishes every sync_interval steps
and the explorer takes the newest version at its next step. `explorer_driven`: every sync_interval
explore steps the explorer asks, and the trainer publishes after its next step. With a driven style
the explorer never samples what `max_staleness` would throw away.

In turns (explore → train → sync, never both at once) only with `fixed` and offset 0: a driven style
lets the explorer go on with the weights it has, so its sides overlap, whatever the offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from algorithms.registry import args_of
from schemas.stage_kind import BOTH, Side, stage_kind
from schemas.synchronizer import takes_turns

if TYPE_CHECKING:
    from schemas import ExperimentConfig

STYLES = ("fixed", "explorer_driven", "trainer_driven")


@dataclass(frozen=True)
class Schedule:
    style: str  # synchronizer.sync_style
    interval: int  # synchronizer.sync_interval
    offset: int  # synchronizer.sync_offset
    sides: tuple[Side, ...]  # what this stage runs: explorer (the engines), trainer, or both
    exchanges: bool = True  # an RL stage: its explorer and trainer trade experiences and weights (SFT, bench: no)
    max_staleness: int | None = None  # algorithm.sample_strategy_args.max_staleness
    method: str = "nccl"  # synchronizer.sync_method: how a version reaches the engines (the policy's transport)
    timeout_s: float = 3600.0  # synchronizer.sync_timeout: the longest either side waits for the other
    shares_devices: bool = False  # mode colocate: the engines and the trainer take turns on the same devices
    eval_interval: int = 0  # explorer.eval_interval: evaluate every this many steps (and at the last); 0: at the last

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"synchronizer.sync_style {self.style!r}: one of {', '.join(STYLES)}")

    @classmethod
    def of(cls, config: ExperimentConfig) -> Schedule:
        sync, kind = config.synchronizer, stage_kind(config)
        return cls(style=sync.sync_style, interval=sync.sync_interval, offset=sync.sync_offset, sides=kind.sides,
                   exchanges=kind.exchanges_weights,
                   max_staleness=args_of(config.algorithm, "sample_strategy").get("max_staleness"),
                   method=sync.sync_method, timeout_s=float(sync.sync_timeout), shares_devices=kind.shares_devices,
                   eval_interval=config.explorer.eval_interval)

    # -- what runs, and how ----------------------------------------------------------------------

    def eval_due(self, step: int, total_steps: int) -> bool:
        """Whether the weights of `step` are evaluated: every eval_interval steps, and the last."""
        return step == total_steps or bool(self.eval_interval and step % self.eval_interval == 0)

    @property
    def explores(self) -> bool:
        """This stage runs the engines."""
        return "explorer" in self.sides

    @property
    def trains(self) -> bool:
        return "trainer" in self.sides

    @property
    def in_turns(self) -> bool:
        """Explorer and trainer never run at once: step k explores with the weights of step k-1."""
        return takes_turns(self.style, self.offset)

    @property
    def overlapped(self) -> bool:
        """Explorer and trainer run at the same time, sharing the compute: in this process (mode both)
        or beside it (a train and an explore deployment of one experiment)."""
        return self.exchanges and not self.in_turns

    @property
    def samples_trainer_weights(self) -> bool:
        """Every explore step here samples exactly the weights the trainer holds, while nothing trains:
        an RL stage with both sides in this process, in turns, a sync every step."""
        return self.exchanges and self.sides == BOTH and self.in_turns and self.interval == 1

    # -- versions and waits ----------------------------------------------------------------------

    def version_for_step(self, step: int) -> int | None:
        """The weights version explore step `step` samples with (fixed style), or None: the newest."""
        if self.style != "fixed":
            return None
        return max(0, self.interval * ((step - 1 - self.offset) // self.interval))

    def publish_due(self, step: int, total_steps: int, requested: bool) -> bool:
        """Whether the trainer publishes its weights after train step `step` (`requested`: an explorer's
        request not yet answered, explorer_driven)."""
        if step == total_steps:
            return True  # the final model is what the explorer evaluates last
        if self.style == "explorer_driven":
            return requested
        return step % self.interval == 0  # fixed, trainer_driven

    def asks_for_weights(self, step: int, last_request: int, serving: int) -> bool:
        """explorer_driven: before explore step `step`, ask the trainer for newer weights (every
        sync_interval steps since the last request, when newer ones can exist yet)."""
        return self.style == "explorer_driven" and step - 1 - last_request >= self.interval and serving < step - 1

    def room_after(self, step: int, serving: int) -> int | None:
        """Driven styles: explore step `step` must wait for a version newer than this one, or it samples
        what max_staleness throws away (None: it may go on with the version it serves)."""
        limit = self.max_staleness
        if self.style == "fixed" or limit is None or (step - 1) - serving <= limit:
            return None
        return step - 2 - limit
