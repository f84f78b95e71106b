"""gsm8k-verl-lora — GRPO on Llama-3.2-3B-Instruct with a rank-32 LoRA, veRL trainer, 1 node × 4 GPUs.

Run it:  rft run gsm8k-verl-lora     (needs 4 GPUs; inspect first: rft validate gsm8k-verl-lora)
"""

from deployments.recipes._llama_gsm8k import ALGORITHM, BUFFER, SYNCHRONIZER
from schemas import (
    ClusterConfig,
    ExperimentConfig,
    ExplorerConfig,
    LoRAConfig,
    ModelConfig,
    VerlTrainerConfig,
    VllmModelConfig,
)

config = ExperimentConfig(
    project="rft",
    name="gsm8k-verl-lora",
    checkpoint_root_dir="./checkpoints",
    algorithm=ALGORITHM,
    model=ModelConfig(
        model_path="meta-llama/Llama-3.2-3B-Instruct",
        max_prompt_tokens=1024,
        max_response_tokens=1024,
        lora_configs=[LoRAConfig(lora_rank=32, lora_alpha=32, target_modules="all-linear")],
    ),
    cluster=ClusterConfig(node_num=1, gpu_per_node=4),
    buffer=BUFFER,
    explorer=ExplorerConfig(
        eval_interval=10, rollout_model=VllmModelConfig(engine_num=2, gpu_memory_utilization=0.7)
    ),
    trainer=VerlTrainerConfig(save_interval=10),
    synchronizer=SYNCHRONIZER,
)
