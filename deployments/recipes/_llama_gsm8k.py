"""Shared parts of the Llama-3.2-3B GSM8K recipes (gsm8k-tinker, gsm8k-verl-lora); not a recipe itself."""

from deployments.recipes._gsm8k import HUB, gsm8k_input
from schemas import AlgorithmConfig, BufferConfig, OptimizerConfig, SynchronizerConfig

ALGORITHM = AlgorithmConfig(
    algorithm_type="grpo",
    repeat_times=8,
    optimizer=OptimizerConfig(lr=1e-5),
    kl_loss_fn="none",
    kl_loss_fn_args={"kl_coef": 0.0},
)

BUFFER = BufferConfig(
    batch_size=96,
    total_epochs=1,
    explorer_input=gsm8k_input(HUB),
)

# One step of staleness: the explorer runs one step ahead; weights go through checkpoints.
SYNCHRONIZER = SynchronizerConfig(sync_method="checkpoint", sync_interval=1, sync_offset=1)
