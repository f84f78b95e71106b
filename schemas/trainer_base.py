"""What every trainer backend's settings class has: the shared settings, the facts each declares (what it cannot
provide, the KL and entropy terms it runs, its sync methods, where its weights live, its modules), the generated
refusal of what it cannot run (`check_needs`), and the critic's section. The backends' classes: schemas/trainer.py
(torch, and the union of all), schemas/trainer_verl.py, schemas/trainer_tinker.py."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from algorithms import POLICY_LOSS_FNS, needs_critic
from algorithms.needs import pieces
from algorithms.registry import NEED_TEXT, NEEDS, Need
from schemas.algorithm_registry import SAMPLE_STRATEGY_NEEDS
from schemas.base import Entry, Section, Variant, honoured
from schemas.resolver import Resolver
from schemas.stage_kind import stage_kind

if TYPE_CHECKING:
    from schemas.explorer import InferenceBase
    from schemas.sections import Sections

TRAINER_TYPES = ("torch", "verl", "tinker")
DEFAULT_TRAINER_TYPE = "verl"  # Trinity-RFT's default
# The needs a stage that explores but does not train still has of its trainer backend's (the explorer's side of
# it: the advantages are made there); a stage that trains has them all.
EXPLORER_NEEDS: frozenset[Need] = frozenset({"teacher", "greedy_baseline", "groups", "steps"})


class TrainerBase(Variant):
    """Settings every trainer honours, and the facts every trainer backend declares (defaults: a trainer
    on this cluster that runs every loss and term algorithms/ implements)."""

    TAG: ClassVar[str] = "trainer_type"
    # What it cannot provide of what a piece may need (algorithms/registry.py `Need`), with why: it provides every
    # other need, and runs each policy loss, advantage, KL term and sample strategy whose needs it provides.
    CANNOT: ClassVar[Mapping[Need, str]] = {}
    # KL-to-reference estimators (kl_loss_fn) and entropy terms (entropy_loss_fn); None: every one built.
    KL_LOSSES: ClassVar[Collection[str] | None] = None
    ENTROPY_LOSSES: ClassVar[Collection[str] | None] = None
    # Where its trained weights live: "local" (Hugging Face folders and tensors the vLLM engines load, the
    # start of a next stage) or "tinker" (on the Tinker service, as tinker:// paths). Engines declare the
    # same of what they sample (schemas/explorer.py).
    WEIGHTS: ClassVar[str] = "local"
    WEIGHTS_NOTE: ClassVar[str] = ""  # where its weights go, when only some sync methods move them ("they ...")
    # synchronizer.sync_method values its weights can travel by.
    SYNC_METHODS: ClassVar[tuple[str, ...]] = ("nccl", "memory", "checkpoint")
    # The runtime modules (files, or folders ending in /) that implement it: the algorithm settings every
    # trainer implements must be read there, unless ALGORITHM_SETTINGS says otherwise.
    MODULES: ClassVar[tuple[str, ...]] = ()
    SETTINGS: ClassVar[dict[str, Entry]] = {}
    ALGORITHM_SETTINGS: ClassVar[dict[str, Entry]] = {}
    # True: the trainer actor only drives worker processes of its own that hold the devices (the resource
    # plan gives the actor none and the workers the trainer's share).
    DEVICES_IN_WORKERS: ClassVar[bool] = False

    save_interval: int = Field(0, ge=0, description="Checkpoint every this many train steps (0: only at the end).")
    max_checkpoints_to_keep: int | None = Field(
        None, ge=1, description="Keep the newest this many global_step_N checkpoints; an older one is deleted once a "
        "newer one is whole (veRL's max_actor_ckpt_to_keep). None: keep all.",
    )
    save_hf_checkpoint: Literal["last", "always", "never"] = Field(
        "last", description="When to also write a Hugging Face folder (the next stage starts from the last one)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm.")
    micro_batch_size: int = Field(
        1, ge=1, description="Experiences per forward/backward pass (gradients accumulate over the train batch)."
    )

    @classmethod
    def provides(cls) -> frozenset[Need]:
        return frozenset(NEEDS) - frozenset(cls.CANNOT)

    @classmethod
    def policy_losses(cls) -> list[str]:
        """The policy losses it runs: those whose needs it provides."""
        return [name for name in POLICY_LOSS_FNS if POLICY_LOSS_FNS.needs_of(name) <= cls.provides()]

    def check_needs(self, r: Resolver[Sections], variants: Mapping[str, type[TrainerBase]]) -> None:
        """Refuse each piece of the algorithm (its policy loss, advantage, KL terms, sample strategy) that needs what
        this backend cannot provide, naming the piece, the need, why, and the trainers that run it; each need once,
        at the first piece that has it. A stage that only explores has only the explorer's needs of it. `variants`: every
        trainer backend (to name those that run what this one refuses)."""
        c = r.config
        kind = stage_kind(c)
        alg = c.algorithm
        named: set[Need] = set()
        strategy = ("sample_strategy", alg.sample_strategy, SAMPLE_STRATEGY_NEEDS.get(alg.sample_strategy, frozenset()))
        for field, name, needs in [*pieces(alg, strict=False), strategy]:
            for need in [n for n in NEEDS if n in needs and n in self.CANNOT and n not in named]:
                if not kind.trains and not (kind.explores and need in EXPLORER_NEEDS):
                    continue
                named.add(need)
                if str(c.derived.get(f"algorithm.{field}", "")).startswith("preset of"):
                    field, name = "algorithm_type", alg.algorithm_type  # what the user wrote
                others = " or ".join(repr(t) for t, variant in variants.items() if needs <= variant.provides())
                r.error(f"algorithm.{field}", f"{name!r} needs {NEED_TEXT[need]}, which trainer_type "
                        f"{self.trainer_type!r} cannot train with: {self.CANNOT[need]}"
                        + (f"; trainer_type {others} runs it" if others else ""))

    def check(self, r: Resolver[Sections], rollout: InferenceBase) -> None:
        """This backend's own rules, run by schemas/rules.py once the algorithm and model are resolved; `rollout`: the
        explorer's rollout model, the engines that sample what it trains."""

    @classmethod
    def carried_from(cls, section: dict[str, Any], previous: TrainerBase) -> dict[str, tuple[Any, str]]:
        """Settings a stage whose trainer section is `section` (as written) takes over from the training
        stage before it: {field: (value, why)}."""
        return {}


class CriticOptimConfig(Section):
    """The critic's optimizer: AdamW with the policy's betas, eps and weight decay and schedule (veRL's
    `critic.optim`; only its learning rate differs by default)."""

    lr: float = Field(1e-5, gt=0, description="Peak learning rate of the critic (veRL's and Trinity's critic.optim.lr).")


class CriticConfig(Section):
    """The value model of PPO with GAE (advantage_fn 'ppo'): model.critic_model_path (by default the policy's
    model) with a scalar head, trained beside the policy on the same batches (Trinity's
    trainer.trainer_config.critic, veRL's critic section: the same names)."""

    optim: CriticOptimConfig = Field(default_factory=CriticOptimConfig, description="The critic's optimizer.")
    cliprange_value: float = Field(
        0.5, gt=0, description="Clip range of the value loss: new values are clipped to old ± this (veRL's default)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm of the critic.")
    ppo_epochs: int = Field(
        1, ge=1, description="Optimizer steps of the critic on each batch (veRL's critic.ppo_epochs): from the second "
        "on, its values have moved from the old ones and cliprange_value binds.")
    critic_warmup: int = Field(
        0, ge=0, description="Train steps at the start in which only the critic learns (veRL's trainer.critic_warmup): "
        "the policy keeps its weights until the values have settled.")


# The `critic` section of a trainer that trains one (torch, veRL).
CRITIC_SETTINGS: dict[str, Entry] = {
    "critic": honoured().warn_if(
        lambda v, c: not needs_critic(c.algorithm),
        "has no effect: only advantage_fn 'ppo' (GAE, the ppo preset) trains a critic"),
}


def critic_field() -> Any:  # noqa: ANN401  (a pydantic FieldInfo)
    return Field(default_factory=CriticConfig,
                 description="The critic of advantage_fn 'ppo' (GAE): learning rate, value clip.")
