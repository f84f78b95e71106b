"""gsm8k-qwen — Trinity-RFT's quick-start: GRPO on Qwen2.5-1.5B-Instruct, GSM8K, 1 node × 2 GPUs, veRL.

Run it:  rft run gsm8k-qwen     (needs 2 GPUs; inspect first: rft validate gsm8k-qwen)
Same experiment as `rft import-trinity` on the quick-start YAML (paths from TRINITY_* env vars there).
"""

from deployments.recipes._gsm8k import HUB, gsm8k_input
from schemas import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    ExperimentConfig,
    ExplorerConfig,
    ModelConfig,
    OptimizerConfig,
    StorageConfig,
    SynchronizerConfig,
    TrainerInput,
    VerlTrainerConfig,
    VllmModelConfig,
)

config = ExperimentConfig(
    project="rft",
    name="gsm8k-qwen",
    checkpoint_root_dir="./checkpoints",
    algorithm=AlgorithmConfig(algorithm_type="grpo", repeat_times=8, optimizer=OptimizerConfig(lr=1e-5)),
    model=ModelConfig(model_path="Qwen/Qwen2.5-1.5B-Instruct", max_response_tokens=1024, max_model_len=2048),
    cluster=ClusterConfig(node_num=1, gpu_per_node=2),
    buffer=BufferConfig(
        total_epochs=1,
        batch_size=128,
        explorer_input=gsm8k_input(HUB, eval_temperature=None),
        trainer_input=TrainerInput(
            experience_buffer=StorageConfig(name="gsm8k_buffer", storage_type="queue", path="sqlite:///gsm8k.db")
        ),
    ),
    explorer=ExplorerConfig(eval_interval=50, runner_per_model=16, rollout_model=VllmModelConfig(engine_num=1)),
    synchronizer=SynchronizerConfig(sync_method="nccl", sync_interval=1),
    trainer=VerlTrainerConfig(save_interval=100),
)
