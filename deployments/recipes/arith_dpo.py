"""arith-dpo — DPO on generated arithmetic with SmolLM2-135M-Instruct on CPU: a short SFT warm-up on worked
answers (the arith recipe's, 50 steps), then DPO on preference pairs of the same generator: the worked answer
(`solution`, chosen) against the same steps ending in a near-miss result (`rejected`, e.g. "... = 81.
\\boxed{81}" for 82). Both are scored against the warm-up's model (the reference), evaluated on the held-out
problems before and after. Numbers and minutes: docs/recipes/arith-dpo.md.

Run it:  rft run arith-dpo          (inspect first: rft validate arith-dpo)
"""

from deployments.recipes.arith import ARITH_EVAL, ARITH_SYSTEM_PROMPT
from deployments.recipes.arith import config as arith
from schemas import AlgorithmConfig, BufferConfig, ExplorerInput, FormatConfig, OptimizerConfig, StorageConfig

# The warm-up's length: 50 steps of the arith warm-up's batch (16 rows), the train split's first 800 rows.
WARMUP_STEPS = 50
WARMUP_ROWS = WARMUP_STEPS * arith.stages[0].buffer.train_batch_size
# The generator's own columns: the question, the worked answer (chosen) and the near miss (rejected), from the rows
# after the warm-up's: pairs whose chosen side the warm-up has just learned word for word carry nothing new.
ARITH_PAIRS = StorageConfig(
    name="arith-pairs", path="generator:arith", split=f"train[{WARMUP_ROWS}:]",
    format=FormatConfig(prompt_type="plaintext", prompt_key="question", chosen_key="solution", rejected_key="rejected",
                        system_prompt=ARITH_SYSTEM_PROMPT),
)

# The same columns of the held-out problems: the model's own preference on pairs it never trains on.
ARITH_HELDOUT_PAIRS = ARITH_PAIRS.model_copy(update={"name": "arith-heldout-pairs", "split": "test"})

config = arith.with_overrides({
    "name": "arith-dpo",
    "mode": "train",
    # Trinity's dpo preset (beta 0.1, its k2 KL term at 0.001); a constant, small step after the warm-up's 3e-4.
    "algorithm": AlgorithmConfig(algorithm_type="dpo", optimizer=OptimizerConfig(lr=1e-5, lr_scheduler_type="constant")),
    "buffer": BufferConfig(batch_size=16, train_batch_size=16, total_steps=40,  # 16 pairs (32 rows) a step
                           trainer_input={"experience_buffer": ARITH_PAIRS, "eval_pairs": ARITH_HELDOUT_PAIRS},
                           explorer_input=ExplorerInput(eval_tasksets=[ARITH_EVAL])),
    "trainer.save_interval": 40,
    "synchronizer.sync_method": "checkpoint",  # mode train: the evaluations load the trained weights from a checkpoint
    "stages": [arith.stages[0].model_copy(update={"buffer": arith.stages[0].buffer.model_copy(update={"total_steps": WARMUP_STEPS})}),
               {"stage_name": "dpo"}],
})
