"""arith — generated arithmetic (a + b, a - b, a * b) with SmolLM2-135M-Instruct on CPU: learning you can
watch. The untrained model gets a seventh of the sums right by its last number but almost never answers in
\\boxed{} (strict 0). GRPO alone teaches the form within a dozen steps but cannot sharpen sums the model
rarely gets right, so the recipe is the usual cold start: a short SFT warm-up on worked answers, digit by digit,
a difference's ones named and compared first ("ones 4 and 7: 4 < 7, so 14 - 7 = 7, 8 - 1 = 7, 7 - 5 = 2, so
84 - 57 = 27", the generator's `solution` column in its `columns-ones` style), stopped while the model still makes mistakes, then
DAPO on the same problems' rewards, where the groups whose answers differ carry the signal. Numbers and minutes: docs/recipes/arith.md.

Run it:  rft run arith          (inspect first: rft validate arith; the data: generators/)
"""

from schemas import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    DataFormat,
    ExperimentConfig,
    ExplorerConfig,
    ExplorerInput,
    FilterGroupsConfig,
    GenerationConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    StageConfig,
    StorageConfig,
    SynchronizerConfig,
    TaskFormat,
    TasksetConfig,
    TorchTrainerConfig,
    VllmModelConfig,
)

# One system prompt for the SFT rows and the RL prompts: the warm-up teaches the form the RL prompt asks for.
ARITH_SYSTEM_PROMPT = (
    "Solve the arithmetic problem step by step. Put the final answer, a number only, in \\boxed{}, e.g. \\boxed{42}."
)
ARITH_FORMAT = TaskFormat(prompt_key="question", response_key="answer", system_prompt=ARITH_SYSTEM_PROMPT)


def arith_sft(**generator_args: object) -> StorageConfig:
    """The warm-up's rows: the generated train split, the worked `solution` column as the response."""
    return StorageConfig(
        name="arith-sft", path="generator:arith", split="train", generator_args=dict(generator_args),
        format=DataFormat(prompt_type="plaintext", prompt_key="question", response_key="solution",
                            system_prompt=ARITH_SYSTEM_PROMPT),
    )


# The tens-ones worked answers ("65 + 10 = 75, 75 + 7 = 82. \\boxed{82}"): arith-dpo's warm-up and its pairs.
ARITH_SFT = arith_sft()

# The answer counts only in \boxed{} (the form the system prompt asks for), plus the format bonus.
ARITH_REWARD = {"require_boxed": True, "format_score": 0.1}


def arith_taskset(name: str, split: str, **fields) -> TasksetConfig:  # noqa: ANN003
    return TasksetConfig(
        name=name, path="generator:arith", split=split, format=ARITH_FORMAT, reward_fn_args=ARITH_REWARD,
        default_workflow_type="math_workflow", **fields,
    )


# 300 held-out problems, greedy: ±2.3 points (one standard error) at 80 %.
ARITH_EVAL = arith_taskset("arith-eval", "test", rollout_args=GenerationConfig(temperature=0.0))


def sft_warmup(rows: StorageConfig, total_steps: int, min_lr_ratio: float) -> StageConfig:
    """The warm-up stage: `total_steps` steps of 16 worked answers at lr 3e-4, decayed by cosine to `min_lr_ratio` of
    it, evaluated on the held-out problems before and after (~11 s a step on 2 cores)."""
    return StageConfig(
        stage_name="sft_warmup",
        mode="train",
        algorithm=AlgorithmConfig(algorithm_type="sft", optimizer=OptimizerConfig(
            lr=3e-4, lr_scheduler_type="cosine", min_lr_ratio=min_lr_ratio)),
        buffer=BufferConfig(batch_size=16, train_batch_size=16, total_steps=total_steps,
                            trainer_input={"experience_buffer": rows},
                            explorer_input=ExplorerInput(eval_tasksets=[ARITH_EVAL])),
        trainer=TorchTrainerConfig(dtype="float32", device="auto", micro_batch_size=16, save_interval=total_steps),
    )


config = ExperimentConfig(
    mode="both",
    project="rft",
    name="arith",
    checkpoint_root_dir="./checkpoints",
    algorithm=AlgorithmConfig(
        # DAPO (our dapo_full preset, `dapo` before Trinity had a preset of that name): dynamic sampling fills a step
        # with up to 16 groups whose answers differ (2-3 rounds of 16 tasks), clip-higher, token-level loss. At 2e-5
        # held constant a stage gave back after its 4th step what it had gained; decayed to a quarter it keeps it
        # (docs/runs.md, the arith-mid rows).
        algorithm_type="dapo_full",
        repeat_times=8,
        # At most 3 rounds: a 4th found 1-4 more groups for ~18 s of sampling and ~12 s of training (acmpY-s1).
        filter_groups=FilterGroupsConfig(max_num_gen_batches=3),
        optimizer=OptimizerConfig(lr=2e-5, lr_scheduler_type="cosine", min_lr_ratio=0.25),
    ),
    model=ModelConfig(
        model_path="HuggingFaceTB/SmolLM2-135M-Instruct",
        max_prompt_tokens=128,
        # A boxed answer takes ~10 tokens; the untrained model's rambling is cut at 64 (most of it at first).
        max_response_tokens=64,
    ),
    cluster=ClusterConfig(node_num=1, gpu_per_node=0, ray_address="local"),
    buffer=BufferConfig(
        batch_size=16,
        # 10 steps (~1.2-2.4 min each) add 4.3-16.6 points over the warm-up's model (docs/recipes/arith.md, 2 seeds x 2 machines).
        total_steps=10,
        explorer_input=ExplorerInput(
            # 20,000 train rows: the RL problems are drawn from a longer list than the warm-up's 5,000. Sums and
            # differences only: the warm-up learns the train products by heart (94 % of their samples right, 89 % of
            # their groups dropped as all-equal in the acmpY-s1 run), so drawing them cost a third of the rounds.
            taskset=arith_taskset("arith", "train", rollout_args=GenerationConfig(temperature=1.0),
                                  generator_args={"train_size": 20000, "train_operations": ["+", "-"]}),
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
        # Stopped at 100 steps with half its lr left, while the model still errs on a tenth to a fifth of the held-out
        # problems (0.90-0.92 on an AMD EPYC, 0.79-0.82 on an Intel Xeon: the CPUs' float32 kernels round differently):
        # GRPO needs groups whose answers differ (stopped at 85, seed 0 ended at 0.853 -> 0.910, not higher). The
        # comparison written before a borrow is what lets DAPO add from here: from a `columns` warm-up it learnt to skip
        # the borrow. The ones digits are named before they are compared: compared while the second was still to be
        # found in the question, `>=` came out where `<` was right in half the differences missed (docs/runs.md).
        # A product written smaller factor first: a held-out product whose twin is trained is answered from it.
        sft_warmup(arith_sft(solution_style="columns-ones", products_smaller_first=True), total_steps=100,
                   min_lr_ratio=0.5),
        StageConfig(stage_name="grpo"),
    ],
)
