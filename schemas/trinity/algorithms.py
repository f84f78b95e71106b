"""Trinity-RFT's algorithm names that are not built here, each with why (the only place they live).

Read from Trinity-RFT main's registries (agentscope-ai/Trinity-RFT: trinity/algorithm/__init__.py's ALGORITHM_TYPE,
trinity/algorithm/advantage_fn/__init__.py's ADVANTAGE_FN) and the definitions they point to.

- `REFUSED_TYPES`: `algorithm_type` values validation refuses by name (schemas/rules.py), where the unknown ones are
  "unknown algorithm".
- `NOT_BUILT_FUNCTIONS`: names of `algorithm.<kind>_fn` that Trinity registers and no module of algorithms/ implements;
  schemas/algorithm_registry.py lists them beside the built ones, with Trinity's arguments of each (`NOT_BUILT_ARGS`,
  checked like any function's, so a Trinity file reads the same), and refuses each with its reason (`FUNCTION_SETTINGS`).
Trinity's other names of a preset here (`grpo_verl`) are in `schemas.trinity.names`.

Docs: docs/trinity-parity.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from algorithms.registry import Args

REFUSED_TYPES: dict[str, str] = {
    "cpt": "Trinity's continual pre-training preset (CPTAlgorithm) learns from raw text rows; its definition was not "
           "among the Trinity-RFT sources read, and no dataset format here reads raw text (SFT rows are prompt/response "
           "or messages): use algorithm_type sft with such rows",
}

# Clip_B / Clip_V (Trinity #509, arXiv 2602.03392): GRPO's advantage plus a token mask chosen over the whole batch.
_CLIP = ("GRPO's group advantage plus a mask that drops negative-advantage tokens chosen over the whole batch from each "
         "position's entropy under the policy ({what}), which Trinity's veRL trainer computes over the full vocabulary. "
         "Advantages here are computed on the explorer, which has only the sampled tokens' log-probs, and no trainer "
         "here hands a batch mask the entropies: use grpo")
NOT_BUILT_FUNCTIONS: dict[str, dict[str, str]] = {
    "advantage_fn": {
        "clipb": _CLIP.format(what="S = p·(H + log p)"),
        "clipv": _CLIP.format(what="S = p·(H + log p) against the trainer's per-token 'necs'"),
        "cod": "Trinity's Connect-the-Dots research advantage: it reads per-episode fields (exp_type, task_rewards, hint "
               "indices) that only its own research workflows write, which are not built here",
    },
    "policy_loss_fn": {},
    "entropy_loss_fn": {},
}


# ----------------------------------------------------------------------------- their arguments (Trinity's names and defaults)
class ClipBArgs(Args):
    """Trinity's ClipBAdvantageFn (refused: its reason above)."""

    epsilon: float = Field(1e-6, description="Added to the group's std.")
    mu: float = Field(2.5, description="Negative-advantage tokens whose entropy signal is below mean − mu·std are dropped.")


class ClipVArgs(Args):
    """Trinity's ClipVAdvantageFn (refused: its reason above)."""

    epsilon: float = Field(1e-6, description="Added to the group's std.")
    mu: float = Field(8.5, description="Negative-advantage tokens whose signal is above mu·std are dropped.")
    max_frac: float = Field(1e-4, description="Most share of the batch's tokens dropped.")


class CoDArgs(Args):
    """Trinity's CoDAdvantageFn (refused: its reason above)."""

    epsilon: float = Field(1e-6, description="Added to the denominator.")
    enable_step_norm: bool = Field(False, description="Divide by the trajectory's length.")
    std_cal_level: Literal["group", "batch", "none"] = Field("group", description="Where the std is computed.")
    std_threshold: float | None = Field(None, description="Skip groups whose std is at most this.")
    iterative_hint_e2e_causal: bool = Field(False, description="CoD's causal end-to-end advantages.")
    e2e_causal_returns_style: str = Field("mean", description="mean, sliding_window_mean or discounted.")
    e2e_causal_returns_window: int = Field(-1, description="The sliding window's size.")
    e2e_causal_returns_gamma: float = Field(1.0, description="The discount of the discounted style.")
    e2e_causal_baseline: str = Field("group-mean", description="The baseline.")
    mask_format_issue_exp: bool = Field(False, description="Deprecated in Trinity.")
    red_weight_temp: float | None = Field(None, description="Re-weighting temperature.")
    red_weight_adaptive_temp: bool = Field(False, description="An adaptive re-weighting temperature.")
    red_weight_adaptive_version: str | None = Field(None, description="Its version.")
    red_weight_adaptive_level: str | None = Field(None, description="Its level.")
    red_weight_adv_shift: bool = Field(False, description="Shift the re-weighted advantages.")


NOT_BUILT_ARGS: dict[str, dict[str, type[Args]]] = {
    "advantage_fn": {"clipb": ClipBArgs, "clipv": ClipVArgs, "cod": CoDArgs},
    "policy_loss_fn": {},
    "entropy_loss_fn": {},
}
