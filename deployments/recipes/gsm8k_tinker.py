"""gsm8k-tinker — GRPO on Llama-3.2-3B through the Tinker service (rank-32 LoRA), as Trinity's Tinker example.

Run it:  TINKER_API_KEY=... rft run gsm8k-tinker     (inspect first: rft validate gsm8k-tinker)
"""

from deployments.recipes._llama_gsm8k import ALGORITHM, BUFFER, SYNCHRONIZER
from schemas import (
    ClusterConfig,
    ExperimentConfig,
    ExplorerConfig,
    ModelConfig,
    TinkerSamplerConfig,
    TinkerTrainerConfig,
)

config = ExperimentConfig(
    project="rft",
    name="gsm8k-tinker",
    checkpoint_root_dir="./checkpoints",
    algorithm=ALGORITHM,
    model=ModelConfig(
        model_path="meta-llama/Llama-3.2-3B",
        max_prompt_tokens=1024,
        max_response_tokens=1024,
    ),
    cluster=ClusterConfig(node_num=1, gpu_per_node=0),  # all GPU work happens in the Tinker service
    buffer=BUFFER,
    explorer=ExplorerConfig(eval_interval=10, rollout_model=TinkerSamplerConfig()),
    trainer=TinkerTrainerConfig(rank=32, save_interval=10),
    synchronizer=SYNCHRONIZER,
)
