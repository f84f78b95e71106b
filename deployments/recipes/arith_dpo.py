"""arith-dpo — DPO on generated arithmetic with SmolLM2-135M-Instruct on CPU: a short SFT warm-up on worked
answers (tens-ones, 50 steps), then DPO on preference pairs: the worked answer (`solution`, chosen)
against the warm-up model's own wrong answer to the same problem (`rejected`, e.g. "84 - 50 = 54, 54 - 7 = 51.
\\boxed{51}" for 27), sampled once from this recipe's warm-up model (data/arith-self-pairs, written by
scripts/arith_self_pairs.py). Both sides are scored against the warm-up's model (the reference); the held-out
problems are evaluated before and after, and so are the held-out pairs (the model's own wrong answers to them).
Numbers and minutes: docs/recipes/arith-dpo.md.

Run it:  rft run arith-dpo          (inspect first: rft validate arith-dpo)
"""

from deployments.recipes.arith import ARITH_EVAL, ARITH_SFT, ARITH_SYSTEM_PROMPT, sft_warmup
from deployments.recipes.arith import config as arith
from schemas import AlgorithmConfig, BufferConfig, DataFormat, ExplorerInput, OptimizerConfig, StorageConfig

# The warm-up's length: 50 steps of the arith warm-up's batch (16 rows), the train split's first 800 rows.
WARMUP_STEPS = 50
# The tens-ones warm-up its pairs were sampled from (data/arith-self-pairs/meta.json), decayed to 0 over its 50 steps.
WARMUP = sft_warmup(ARITH_SFT, total_steps=WARMUP_STEPS, min_lr_ratio=0.0)
WARMUP_ROWS = WARMUP_STEPS * WARMUP.buffer.train_batch_size
PAIR_FORMAT = DataFormat(prompt_type="plaintext", prompt_key="question", chosen_key="solution", rejected_key="rejected",
                           system_prompt=ARITH_SYSTEM_PROMPT)
# The worked answer (chosen) against the warm-up model's own wrong answer (rejected), sampled from this recipe's
# warm-up model by scripts/arith_self_pairs.py on the train rows after the warm-up's (data/arith-self-pairs/meta.json).
ARITH_PAIRS = StorageConfig(name="arith-self-pairs", path="data/arith-self-pairs", split="train", format=PAIR_FORMAT)
# The same, sampled on the held-out problems: the model's own preference on pairs it never trains on.
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
    "explorer.eval_interval": 10,  # the held-out problems and pairs at steps 10, 20, 30 and 40
    "synchronizer.sync_method": "checkpoint",  # mode train: the evaluations load the trained weights from a checkpoint
    "stages": [WARMUP, {"stage_name": "dpo"}],
})
