"""The experience store under SIGKILL: the explore and train sides as separate processes
(tests/store_worker.py), each killed at a random moment, 20 times over one store. After every kill the
store opens and passes SQLite's integrity check; nothing half-written is read (every explore step has all
its experiences, each read back field for field, every train step all of its batch); nothing a side was
told is committed is lost; and at the end every experience is trained exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from buffer.experience_store import ExperienceStore
from tests.store_worker import BATCH, experience

TRIALS = 20
ROOT = Path(__file__).resolve().parents[1]


def start(role: str, db: Path, journal: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.store_worker", role, str(db), str(journal)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", f"{role} did not start"
    return proc


def kill_later(proc: subprocess.Popen, delay_s: float, alive: list[bool]) -> threading.Thread:
    def kill() -> None:
        time.sleep(delay_s)
        alive.append(proc.poll() is None)  # killed while it ran, not after it died on its own
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


def check(db: Path, explored: Path, trained: Path) -> tuple[int, int]:
    """The store after a kill; returns (explore steps, train steps) committed."""
    with ExperienceStore(db) as store:
        assert store._query("PRAGMA integrity_check") == [("ok",)]
        rows = store._query("SELECT explore_step, eid, data, train_step FROM experiences ORDER BY seq")
    per_step = Counter(step for step, *_ in rows)
    assert set(per_step.values()) <= {BATCH}, per_step  # a put is all or nothing
    for step, eid, data, _ in rows:
        assert eid.startswith(f"x{step}-")
        assert data == experience(step, int(eid.split("-")[1])).to_json()  # read back whole
    marks = Counter(train_step for *_, train_step in rows if train_step is not None)
    assert set(marks.values()) <= {BATCH}, marks  # a train step's mark is all or nothing
    assert sorted(marks) == list(range(len(marks)))  # train steps 0, 1, 2...: none lost, none repeated
    journaled = [int(line) for line in explored.read_text().split()] if explored.exists() else []
    assert set(journaled) <= set(per_step)  # what a put returned from is there
    train_of = {eid: train_step for _, eid, _, train_step in rows}
    for line in trained.read_text().splitlines() if trained.exists() else []:
        step, eids = line.split()
        assert {train_of[eid] for eid in eids.split(",")} == {int(step)}  # what a mark returned from is there
    return len(per_step), len(marks)


def test_the_store_survives_sigkill_of_both_sides(tmp_path: Path) -> None:
    db, explored, trained = tmp_path / "experiences.db", tmp_path / "explored.log", tmp_path / "trained.log"
    rng = random.Random(28)
    alive: list[bool] = []
    counts = []
    for _ in range(TRIALS):
        producer = start("explore", db, explored)
        consumer = start("train", db, trained)
        killers = [kill_later(producer, rng.uniform(0.05, 0.8), alive), kill_later(consumer, rng.uniform(0.05, 0.8), alive)]
        for killer in killers:
            killer.join()
        counts.append(check(db, explored, trained))
    assert alive == [True] * 2 * TRIALS  # every kill hit a running side
    steps, marked = counts[-1]
    print(f"{TRIALS} trials: {steps} explore steps and {marked} train steps committed between the kills")
    assert steps > TRIALS and marked > TRIALS, counts  # both sides made progress between kills

    with ExperienceStore(db) as store:  # train what is left, then: every experience trained exactly once
        while batch := store.take(BATCH):
            store.mark_trained([e.eid for e in batch], store.read_position()["train_step"] + 1)
        trained_eids = store.trained_eids()
        assert sorted(trained_eids) == sorted(store.all_eids()) and len(trained_eids) == steps * BATCH
        assert set(Counter(trained_eids.values()).values()) == {BATCH}
