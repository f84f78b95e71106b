"""KL toward the reference model subtracted from the reward (`algorithm.kl_penalty_fn`), as Trinity-RFT
does it before the advantages: per response token, reward_t = score_t − kl_coef · KL_t, so a sequence's
reward becomes its score minus kl_coef × its KL summed over the response tokens; the advantage function
then runs on those rewards.

The estimators are kl_loss_fn's (algorithms/kl.py; Trinity's names none, k1, k2, k3, low_var_kl, abs,
corrected_k3, and veRL's others), evaluated between the rollout log-probs and the reference model's. It is
a reward: no gradient flows through it (corrected_k3's importance ratio is 1 here, so it is k3, as in
Trinity, which passes no old log-probs to the penalty).

With `adaptive`, kl_coef follows Trinity's proportional controller (Ziegler et al. 2019) toward
`target_kl`, once per train step, after the step's penalty:
    error = clip(kl / target_kl − 1, −0.2, 0.2);  kl_coef ← kl_coef · (1 + error · batch_size / horizon)
where kl is the batch mean of each sequence's per-token mean KL. `KLController.state_dict` is what a
checkpoint must keep for a resumed run to go on with the same coefficient (trainers write it as JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from algorithms.advantage import compute_advantages
from algorithms.kl import KL_LOSS_FNS
from algorithms.registry import is_off

if TYPE_CHECKING:
    import torch

FIELD = "algorithm.kl_penalty_fn"
ERROR_CLIP = 0.2  # the controller's proportional error is clipped to ±0.2 (Trinity, Ziegler et al.)


@dataclass
class KLController:
    """The reward penalty's coefficient: fixed, or adapted toward target_kl."""

    kl_coef: float
    adaptive: bool = False
    target_kl: float | None = None
    horizon: float | None = None

    def __post_init__(self) -> None:
        if self.adaptive and (self.target_kl is None or self.horizon is None):
            raise ValueError(f"{FIELD}_args.adaptive: an adaptive KL coefficient needs target_kl and horizon")

    def update(self, current_kl: float, batch_size: int) -> None:
        """One controller step after a batch of `batch_size` sequences whose mean KL was `current_kl`."""
        if not self.adaptive:
            return
        error = min(max(current_kl / self.target_kl - 1.0, -ERROR_CLIP), ERROR_CLIP)
        self.kl_coef *= 1.0 + error * batch_size / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"kl_coef": float(self.kl_coef)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kl_coef = float(state["kl_coef"])


def penalty_name(algorithm) -> str | None:
    """The estimator `algorithm.kl_penalty_fn` names, or None when the penalty is off."""
    name = getattr(algorithm, "kl_penalty_fn", None)
    if is_off(name):
        return None
    if name not in KL_LOSS_FNS:
        raise ValueError(f"{FIELD}: unknown estimator {name!r}; known: {sorted(KL_LOSS_FNS)}")
    return name


def kl_controller(algorithm) -> KLController | None:
    """The penalty's controller, from algorithm.kl_penalty_fn_args; None when the penalty is off (no
    estimator, or a fixed kl_coef of 0: nothing would change, and no reference model is needed)."""
    name = penalty_name(algorithm)
    if name is None:
        return None
    args = KL_LOSS_FNS.resolve_args(name, getattr(algorithm, "kl_penalty_fn_args", None), kind=FIELD)
    if float(args["kl_coef"]) == 0.0:
        return None  # an adaptive coefficient multiplies: from 0 it stays 0
    return KLController(float(args["kl_coef"]), bool(args.get("adaptive")), args.get("target_kl"), args.get("horizon"))


def token_kl(name: str, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] per-token KL estimate of the sampled tokens, 0 where `mask` is 0."""
    kl = KL_LOSS_FNS[name](logprobs, ref_logprobs, logprobs)
    return kl * mask


def penalized_rewards(
    name: str, kl_coef: float, rewards: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """Rewards [B] minus kl_coef × each sequence's summed token KL, and the batch's mean KL (the mean over
    sequences of each one's per-token mean: what the controller and the `kl_penalty` metric read)."""
    kl, current = batch_kl(name, logprobs, ref_logprobs, mask)
    return (rewards.double() - kl_coef * kl.sum(-1)).float(), current


def batch_kl(name: str, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The per-token KL [B, T] in float64 (near the reference k3's exp(r) − r − 1 cancels to 0 in float32,
    |r| ≲ 1e-4), and the batch's mean KL (the mean over sequences of each one's per-token mean)."""
    import torch

    with torch.no_grad():
        kl = token_kl(name, logprobs.double(), ref_logprobs.double(), mask.double())
        tokens = mask.double().sum(-1)
        per_seq = kl.sum(-1) / tokens.clamp(min=1.0)
        return kl, float(per_seq[tokens > 0].mean()) if bool((tokens > 0).any()) else 0.0


def apply_kl_penalty(
    algorithm, controller: KLController, rewards: torch.Tensor, group_ids: list[str], logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor, mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Outcome advantages [B] (one per sequence) of the KL-penalised rewards (algorithm.advantage_fn over
    `group_ids`), and the metrics kl_penalty (mean KL), kl_penalty_coef (the coefficient used), reward_before_kl and
    reward_after_kl (batch means). Steps the controller once."""
    name, coef = _switched_on(algorithm), controller.kl_coef
    shaped, current = penalized_rewards(name, coef, rewards, logprobs, ref_logprobs, mask)
    import torch

    outcome = torch.ones((rewards.shape[0], 1), dtype=torch.float32)  # one advantage per sequence
    advantages = compute_advantages(algorithm, shaped, group_ids, outcome)[:, 0]
    controller.update(current, int(rewards.shape[0]))
    return advantages, _metrics(current, coef, rewards, shaped)


def token_penalty(
    algorithm, controller: KLController, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
    rewards: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The penalty per response token [B, T], −kl_coef·KL_t, for an advantage made per token (GAE over a critic,
    which adds it to each token's reward), and the metrics of apply_kl_penalty. Steps the controller once."""
    name, coef = _switched_on(algorithm), controller.kl_coef
    kl, current = batch_kl(name, logprobs, ref_logprobs, mask)
    penalty = (-coef * kl).float()
    controller.update(current, int(logprobs.shape[0]))
    return penalty, _metrics(current, coef, rewards, rewards.double() + penalty.double().sum(-1))


def _switched_on(algorithm) -> str:  # noqa: ANN001
    name = penalty_name(algorithm)
    if name is None:
        raise ValueError(f"{FIELD} is off: there is no penalty to apply")
    return name


def _metrics(kl: float, coef: float, before: torch.Tensor, after: torch.Tensor) -> dict[str, float]:
    """Mean KL, the coefficient used, and the batch's mean reward before and after the penalty."""
    return {"kl_penalty": kl, "kl_penalty_coef": coef, "reward_before_kl": float(before.float().mean()),
            "reward_after_kl": float(after.float().mean())}
