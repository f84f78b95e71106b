"""hello — the model learns to answer "who are you?" with one identity string (after agent-lightning's
Tinker "hello" example): GRPO on SmolLM2-135M-Instruct with a LoRA, reward = similarity of the answer to
the target (workflows/hello_workflow.py, data/hello). The reward rises within a few steps; it is the
smoke test of a backend, and `hello-tinker` is the Tinker smoke deployment.

Run it:  rft run hello                                   (torch trainer + vLLM on CPU)
         rft run hello --set model.tinker.enable=true    (Tinker: scripts/tinker-server.sh start first)
"""

from schemas import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    ExperimentConfig,
    ExplorerConfig,
    ExplorerInput,
    GenerationConfig,
    LoRAConfig,
    ModelConfig,
    OptimizerConfig,
    SynchronizerConfig,
    TaskFormat,
    TasksetConfig,
    TorchTrainerConfig,
    VllmModelConfig,
)

HELLO_FORMAT = TaskFormat(prompt_key="prompt", response_key="target")

config = ExperimentConfig(
    mode="both",
    project="rft",
    name="hello",
    checkpoint_root_dir="./checkpoints",
    algorithm=AlgorithmConfig(
        algorithm_type="grpo",
        repeat_times=8,
        # one learning rate for both backends: both train a LoRA (rank 16, alpha 32)
        optimizer=OptimizerConfig(lr=1e-3, weight_decay=0.0),
        kl_loss_fn="none",
        kl_loss_fn_args={"kl_coef": 0.0},
    ),
    model=ModelConfig(
        model_path="HuggingFaceTB/SmolLM2-135M-Instruct",
        max_prompt_tokens=96,
        max_response_tokens=24,
        # switched to Tinker, this becomes trainer.rank (schemas.experiment: Tinker trains its own LoRA)
        lora_configs=[LoRAConfig(lora_rank=16, lora_alpha=32)],
    ),
    cluster=ClusterConfig(node_num=1, gpu_per_node=0, ray_address="local"),
    buffer=BufferConfig(
        batch_size=2,
        total_steps=8,
        total_epochs=100,  # 8 prompts: 4 steps an epoch; total_steps decides
        explorer_input=ExplorerInput(
            taskset=TasksetConfig(
                name="hello", path="data/hello", split="train", format=HELLO_FORMAT,
                rollout_args=GenerationConfig(temperature=1.0), default_workflow_type="hello_workflow",
            ),
            eval_tasksets=[
                TasksetConfig(
                    name="hello-eval", path="data/hello", split="test", format=HELLO_FORMAT, repeat_times=1,
                    rollout_args=GenerationConfig(temperature=0.0), default_workflow_type="hello_workflow",
                )
            ],
        ),
    ),
    explorer=ExplorerConfig(
        eval_interval=8,
        rollout_model=VllmModelConfig(engine_num=1, enforce_eager=True, kv_cache_memory_gb=1.0, dtype="float32"),
    ),
    trainer=TorchTrainerConfig(dtype="float32", micro_batch_size=8, save_interval=2),
    synchronizer=SynchronizerConfig(sync_method="memory", sync_interval=1, sync_offset=0),
)
