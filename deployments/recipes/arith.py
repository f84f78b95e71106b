"""arith — generated arithmetic (a + b, a - b, a * b) with SmolLM2-135M-Instruct on CPU: learning you can
watch. The untrained model gets a quarter of the sums right by its last number but almost never answers in
\\boxed{} (strict ~1 %). GRPO alone teaches the form within a dozen steps but cannot sharpen sums the model
rarely gets right, so the recipe is the usual cold start: a short SFT warm-up on worked answers
("65 + 10 = 75, 75 + 7 = 82. \\boxed{82}", the generator's `solution` column), evaluated before and after,
then GRPO on the same problems' rewards. Numbers and minutes: docs/recipes/arith.md.

Run it:  rft run arith          (inspect first: rft validate arith; the data: schemas/generators.py)
"""

from schemas import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    ExperimentConfig,
    ExplorerConfig,
    ExplorerInput,
    FormatConfig,
    GenerationConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    StageConfig,
    StorageConfig,
    SynchronizerConfig,
    TasksetConfig,
    TorchTrainerConfig,
    VllmModelConfig,
)

# One system prompt for the SFT rows and the RL prompts: the warm-up teaches the form the RL prompt asks for.
ARITH_SYSTEM_PROMPT = (
    "Solve the arithmetic problem step by step. Put the final answer, a number only, in \\boxed{}, e.g. \\boxed{42}."
)
ARITH_FORMAT = FormatConfig(prompt_key="question", response_key="answer", system_prompt=ARITH_SYSTEM_PROMPT)
# The warm-up's rows: the same generated train split, the worked `solution` column as the response.
ARITH_SFT = StorageConfig(
    name="arith-sft", path="generator:arith", split="train",
    format=FormatConfig(prompt_type="plaintext", prompt_key="question", response_key="solution",
                        system_prompt=ARITH_SYSTEM_PROMPT),
)
# The answer counts only in \boxed{} (the form the system prompt asks for), plus the format bonus.
ARITH_REWARD = {"require_boxed": True, "format_score": 0.1}


def arith_taskset(name: str, split: str, **fields) -> TasksetConfig:  # noqa: ANN003
    return TasksetConfig(
        name=name, path="generator:arith", split=split, format=ARITH_FORMAT, reward_fn_args=ARITH_REWARD,
        default_workflow_type="math_workflow", **fields,
    )


# 300 held-out problems, greedy: ±2.3 points (one standard error) at 80 %.
ARITH_EVAL = arith_taskset("arith-eval", "test", rollout_args=GenerationConfig(temperature=0.0))

config = ExperimentConfig(
    mode="both",
    project="rft",
    name="arith",
    checkpoint_root_dir="./checkpoints",
    algorithm=AlgorithmConfig(
        algorithm_type="grpo",
        repeat_times=8,
        # After the warm-up the policy is nearly deterministic (entropy ~0.02) and most groups agree: at 2e-5
        # Adam's sign-sized steps on that thin signal cost 9 points of held-out accuracy in 30 steps.
        optimizer=OptimizerConfig(lr=5e-6, lr_scheduler_type="constant"),
        kl_loss_fn="none",
        kl_loss_fn_args={"kl_coef": 0.0},
    ),
    model=ModelConfig(
        model_path="HuggingFaceTB/SmolLM2-135M-Instruct",
        max_prompt_tokens=128,
        # A boxed answer takes ~10 tokens; the untrained model's rambling is cut at 64 (most of it at first).
        max_response_tokens=64,
    ),
    cluster=ClusterConfig(node_num=1, gpu_per_node=0, ray_address="local"),
    buffer=BufferConfig(
        batch_size=8,
        # 10 steps (~4 min) fit the 30-minute budget after the 200-step warm-up: 0.820 -> 0.833 on seed 0.
        total_steps=10,
        explorer_input=ExplorerInput(
            taskset=arith_taskset("arith", "train", rollout_args=GenerationConfig(temperature=1.0)),
            eval_tasksets=[ARITH_EVAL],
        ),
    ),
    explorer=ExplorerConfig(
        eval_interval=10,
        rollout_model=VllmModelConfig(
            engine_num=1, enforce_eager=True, kv_cache_memory_gb=2.0, dtype="float32", enable_prefix_caching=True
        ),
    ),
    trainer=TorchTrainerConfig(dtype="float32", device="auto", micro_batch_size=16, save_interval=10),
    synchronizer=SynchronizerConfig(sync_method="memory", sync_interval=1, sync_offset=0),
    monitor=MonitorConfig(monitor_type="mlflow"),
    stages=[
        StageConfig(
            stage_name="sft_warmup",
            mode="train",
            # 200 steps of 16 rows (~5.3 s each), lr 3e-4 decayed to 0: 0.82 strict (`rft run arith`, seed 0); over 150
            # steps 0.81; at a constant 1e-4: 0.55 after 40, 0.73 after 80, 0.81 after 160 (in-process probes, test 300).
            algorithm=AlgorithmConfig(algorithm_type="sft", optimizer=OptimizerConfig(lr=3e-4, lr_scheduler_type="cosine")),
            buffer=BufferConfig(batch_size=16, train_batch_size=16, total_steps=200,
                                trainer_input={"experience_buffer": ARITH_SFT},
                                explorer_input=ExplorerInput(eval_tasksets=[ARITH_EVAL])),
            trainer=TorchTrainerConfig(dtype="float32", device="auto", micro_batch_size=16, save_interval=50),
        ),
        StageConfig(stage_name="grpo"),
    ],
)
