"""Shared parts of the Llama-3.2-3B GSM8K recipes (gsm8k-tinker, gsm8k-verl-lora); not a recipe itself."""

from schemas import (
    AlgorithmConfig,
    BufferConfig,
    ExplorerInput,
    FormatConfig,
    GenerationConfig,
    OptimizerConfig,
    SynchronizerConfig,
    TasksetConfig,
)

GSM8K_FORMAT = FormatConfig(prompt_key="question", response_key="answer")

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
    explorer_input=ExplorerInput(
        taskset=TasksetConfig(
            name="gsm8k",
            path="openai/gsm8k",
            subset_name="main",
            split="train",
            format=GSM8K_FORMAT,
            rollout_args=GenerationConfig(temperature=1.0),
            default_workflow_type="math_workflow",
        ),
        eval_tasksets=[
            TasksetConfig(
                name="gsm8k-eval",
                path="openai/gsm8k",
                subset_name="main",
                split="test",
                format=GSM8K_FORMAT,
                rollout_args=GenerationConfig(temperature=0.0),
                default_workflow_type="math_workflow",
            )
        ],
    ),
)

# One step of staleness: the explorer runs one step ahead; weights go through checkpoints.
SYNCHRONIZER = SynchronizerConfig(sync_method="checkpoint", sync_interval=1, sync_offset=1)
