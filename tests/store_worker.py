"""A side of the explore→train queue as a process of its own, for tests/test_store_kill.py to SIGKILL.

    python -m tests.store_worker explore DB JOURNAL   puts explore steps of BATCH experiences, one put each
    python -m tests.store_worker train DB JOURNAL     takes BATCH, marks them trained as the next train step

Each side appends a line to JOURNAL only after the store returned (what it knows is committed), and prints
"ready" once the store is open. Both run until killed.
"""

from __future__ import annotations

import os
import sys
import time

from buffer.experience import Experience
from buffer.experience_store import ExperienceStore

BATCH = 4
AHEAD = 4  # explore waits while this many batches are untrained (as a run's explore waits for its trainer)


def experience(step: int, i: int) -> Experience:
    """The experience `i` of explore step `step`, the same every time (the test compares what it reads back)."""
    return Experience(
        eid=f"x{step}-{i}", task_id=f"task/{step}", group_id=f"g{step}", prompt_token_ids=list(range(40)),
        response_token_ids=list(range(i + 8)), logprobs=[-0.5] * (i + 8), reward=float(i), explore_step=step,
        model_version=step, response_text="y" * 2000,  # a few pages per put: a kill can land inside one
    )


def journal(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def explore(store: ExperienceStore, path: str) -> None:
    step = store.max_explore_step() + 1
    while True:
        while store.count_untrained() >= AHEAD * BATCH:
            time.sleep(0.005)
        store.put([experience(step, i) for i in range(BATCH)])
        journal(path, str(step))
        step += 1


def train(store: ExperienceStore, path: str) -> None:
    while True:
        batch = store.take(BATCH, timeout_s=0.5, poll_s=0.005)
        if len(batch) < BATCH:
            continue
        step = store.read_position()["train_step"] + 1
        eids = [e.eid for e in batch]
        store.mark_trained(eids, step)
        journal(path, f"{step} {','.join(eids)}")


if __name__ == "__main__":
    role, db, path = sys.argv[1:4]
    opened = ExperienceStore(db)
    print("ready", flush=True)
    {"explore": explore, "train": train}[role](opened, path)
