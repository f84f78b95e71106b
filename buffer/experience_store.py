"""The experience buffer: a SQLite file under the experiment directory, and the explore→train queue.

Explore `put`s experiences as they are produced (one transaction, durable on return). Train `take`s
the oldest untrained ones and, only after its optimizer step succeeded, `mark_trained`s them with the
train step. Until marked, an experience stays untrained, so a crash between take and mark never
loses one; marking refuses an experience already trained, so none is trained twice.

On resume from a checkpoint taken at train step K, `restore_read_position` un-marks what later
(lost) train steps consumed, so those experiences are trained again by the restored weights.

An experience too stale to train on (older weights than the sample strategy's `max_staleness` allows)
is `mark_skipped` instead: accounted for, never trained, never handed out again.

Dynamic sampling (buffer/dynamic_sampling.py) `put`s the groups it dropped with the ones it kept, in the
same transaction, marked dropped by their explore step: recorded, never trained, never handed out, and
never un-marked by a resume (the explore side wrote them once and for all). The same transaction records
how many taskset batches the step read, so the next step (and a retried one) reads on from the right
place (`taskset_batches_before`). What the experience pipeline's filters leave out is dropped the same way.

Several processes may open the same file (WAL mode; writers serialise on SQLite's lock). One
consumer at a time is assumed: two trainers calling `take` would get the same experiences.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from buffer.experience import Experience
from checkpointing.layout import BUFFER_DB

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order = queue order
    eid           TEXT NOT NULL UNIQUE,
    task_id       TEXT NOT NULL,
    group_id      TEXT NOT NULL,
    explore_step  INTEGER NOT NULL,
    model_version INTEGER NOT NULL,
    reward        REAL NOT NULL,
    created_at    REAL NOT NULL,
    train_step    INTEGER,                            -- NULL until trained
    data          TEXT NOT NULL,                      -- the whole Experience as JSON
    skipped_step  INTEGER,                            -- the train step that left it out as too stale
    dropped_step  INTEGER                             -- the explore step that dropped it (dynamic sampling, pipeline)
);
CREATE TABLE IF NOT EXISTS explore_rounds (
    explore_step  INTEGER PRIMARY KEY,
    batches       INTEGER NOT NULL                    -- taskset batches the step read (dynamic sampling)
);
CREATE INDEX IF NOT EXISTS experiences_untrained ON experiences (seq) WHERE train_step IS NULL;
CREATE INDEX IF NOT EXISTS experiences_train_step ON experiences (train_step);
CREATE INDEX IF NOT EXISTS experiences_explore_step ON experiences (explore_step);
"""



# How `take` orders the untrained experiences (SQL of a fixed set, never user text).
ORDERS = {
    "oldest": "seq",  # insertion order: a FIFO queue
    "newest": "model_version DESC, seq",  # sampled with the newest weights first
    "largest_advantage": "ABS(COALESCE(json_extract(data, '$.advantage'), 0)) DESC, seq",
}


class ExperienceStore:
    """Durable queue of experiences in one SQLite file; safe across threads and processes."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode; writes use explicit BEGIN IMMEDIATE so each call is one transaction.
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.Lock()  # one connection shared by the runner threads
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit survives power loss too, not only a killed process; writes are few.
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(experiences)")}
            if "skipped_step" not in columns:  # a buffer written before staleness was tracked
                self._conn.execute("ALTER TABLE experiences ADD COLUMN skipped_step INTEGER")
            if "dropped_step" not in columns:  # ... or before dynamic sampling
                self._conn.execute("ALTER TABLE experiences ADD COLUMN dropped_step INTEGER")

    @classmethod
    def for_experiment(cls, experiment_dir: str | Path) -> ExperienceStore:
        """The store of an experiment: `{experiment_dir}/buffer/experiences.db`."""
        return cls(Path(experiment_dir) / BUFFER_DB)

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ExperienceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, fn: Any) -> Any:
        """Run `fn(conn)` inside one immediate transaction (rolled back if it raises)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return result

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    # -- producer side -----------------------------------------------------------------------------

    def put(self, experiences: Iterable[Experience], *, dropped: Iterable[Experience] = (),
            batches: tuple[int, int] | None = None) -> int:
        """Persist experiences (all or none) and, in the same transaction, those dynamic sampling or the
        experience pipeline `dropped` (marked dropped by their explore step) and `batches` = (explore step,
        taskset batches it read); returns how many were stored. A duplicate eid is an error."""
        now = time.time()
        rows = [
            (
                e.eid, e.task_id, e.group_id, e.explore_step, e.model_version, float(e.reward), now,
                json.dumps(asdict(e)), e.explore_step if is_dropped else None,
            )
            for is_dropped, group in ((False, experiences), (True, dropped))
            for e in group
        ]
        if not rows and batches is None:
            return 0

        eids = [r[0] for r in rows]
        if len(set(eids)) != len(eids):
            dup = next(e for e in eids if eids.count(e) > 1)
            raise ValueError(f"{self.path}: experience eid '{dup}' appears twice in one put")

        def insert(conn: sqlite3.Connection) -> int:
            placeholders = ",".join("?" * len(eids))
            stored = conn.execute(
                f"SELECT eid FROM experiences WHERE eid IN ({placeholders}) LIMIT 1", eids
            ).fetchone()
            if stored:
                raise ValueError(f"{self.path}: experience eid '{stored[0]}' is already stored")
            conn.executemany(
                "INSERT INTO experiences (eid, task_id, group_id, explore_step, model_version,"
                " reward, created_at, data, dropped_step) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            if batches is not None:  # a step that stored nothing is explored again, from the same place
                conn.execute("INSERT OR REPLACE INTO explore_rounds (explore_step, batches) VALUES (?, ?)", batches)
            return len(rows)

        return self._write(insert)

    # -- consumer side -----------------------------------------------------------------------------

    def take(self, n: int, *, timeout_s: float = 0.0, poll_s: float = 0.2, order: str = "oldest") -> list[Experience]:
        """`n` untrained experiences in `order` (ORDERS); nothing changes until marked.

        Waits up to `timeout_s` for `n` to be available (explore may be filling the queue from
        another process) and then returns what there is, possibly fewer. Every order is total (ties
        go by insertion), so a resumed run takes exactly what an uninterrupted one would.
        """
        if n < 1:
            raise ValueError(f"take(n) needs n >= 1, got {n}")
        if order not in ORDERS:
            raise ValueError(f"take(order={order!r}): one of {sorted(ORDERS)}")
        deadline = time.monotonic() + timeout_s
        while self.count_untrained() < n and time.monotonic() < deadline:
            time.sleep(poll_s)
        rows = self._query(
            "SELECT data FROM experiences WHERE train_step IS NULL AND skipped_step IS NULL AND dropped_step IS NULL "
            f"ORDER BY {ORDERS[order]} LIMIT ?", (n,)
        )
        return [Experience(**json.loads(data)) for (data,) in rows]

    def mark_trained(self, eids: Sequence[str], train_step: int) -> None:
        """Commit a train step: these experiences are trained (all or none).

        Raises if an eid is unknown or already trained, so a double-train is caught, not recorded.
        """
        eids = list(eids)
        if not eids:
            return
        if len(set(eids)) != len(eids):
            raise ValueError(f"mark_trained: duplicate eids in one train step {train_step}")

        def mark(conn: sqlite3.Connection) -> None:
            placeholders = ",".join("?" * len(eids))
            found = dict(
                conn.execute(
                    f"SELECT eid, train_step FROM experiences WHERE eid IN ({placeholders})", eids
                ).fetchall()
            )
            unknown = [e for e in eids if e not in found]
            if unknown:
                raise KeyError(f"{self.path}: unknown experience eids {unknown[:5]}")
            trained = {e: s for e, s in found.items() if s is not None}
            if trained:
                eid, step = next(iter(trained.items()))
                raise ValueError(
                    f"{self.path}: experience '{eid}' was already trained at train step {step} "
                    f"({len(trained)} of {len(eids)} already trained); refusing to train it again"
                )
            conn.execute(
                f"UPDATE experiences SET train_step = ? WHERE eid IN ({placeholders})",
                [train_step, *eids],
            )

        self._write(mark)

    def mark_skipped(self, eids: Sequence[str], train_step: int) -> None:
        """These untrained experiences are left out by `train_step` (too stale): never trained, never taken."""
        eids = list(eids)
        if not eids:
            return

        def mark(conn: sqlite3.Connection) -> None:
            placeholders = ",".join("?" * len(eids))
            cur = conn.execute(
                f"UPDATE experiences SET skipped_step = ? WHERE eid IN ({placeholders})"
                " AND train_step IS NULL AND skipped_step IS NULL AND dropped_step IS NULL",
                [train_step, *eids],
            )
            if cur.rowcount != len(eids):
                raise ValueError(f"{self.path}: {len(eids) - cur.rowcount} of the experiences to skip are unknown, "
                                 "trained, skipped or dropped already")

        self._write(mark)

    def skip_stale(self, min_version: int, train_step: int) -> int:
        """Mark every untrained experience sampled with weights older than `min_version` as skipped by
        `train_step`; returns how many."""
        return self._write(lambda conn: conn.execute(
            "UPDATE experiences SET skipped_step = ? WHERE train_step IS NULL AND skipped_step IS NULL"
            " AND dropped_step IS NULL AND model_version < ?", (train_step, min_version)).rowcount)

    # -- resumption --------------------------------------------------------------------------------

    def read_position(self) -> dict[str, int]:
        """What a checkpoint saves: the last committed train step and how many were trained (or
        skipped as stale) by it."""
        (last_step, trained, skipped), = self._query(
            "SELECT MAX(train_step), COUNT(train_step), COUNT(skipped_step) FROM experiences"
        )
        return {"train_step": -1 if last_step is None else int(last_step), "trained": int(trained), "skipped": int(skipped)}

    def restore_read_position(self, position: dict[str, int]) -> int:
        """Rewind to a checkpoint's position: un-mark experiences of later train steps.

        Returns how many went back to untrained. Raises if the store has fewer trained than the
        checkpoint recorded (the buffer file is not the one the checkpoint was taken with).
        """
        step, trained = int(position["train_step"]), int(position["trained"])

        def rewind(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "UPDATE experiences SET train_step = NULL WHERE train_step > ?", (step,)
            )
            unskipped = conn.execute("UPDATE experiences SET skipped_step = NULL WHERE skipped_step > ?", (step,)).rowcount
            (now_skipped,) = conn.execute("SELECT COUNT(skipped_step) FROM experiences").fetchone()
            if now_skipped != int(position.get("skipped", 0)):
                raise ValueError(
                    f"{self.path}: checkpoint expects {position.get('skipped', 0)} experiences skipped up to train "
                    f"step {step}, the buffer has {now_skipped}: buffer and checkpoint do not match"
                )
            (now_trained,) = conn.execute(
                "SELECT COUNT(*) FROM experiences WHERE train_step IS NOT NULL"
            ).fetchone()
            if now_trained != trained:
                raise ValueError(
                    f"{self.path}: checkpoint expects {trained} experiences trained up to train "
                    f"step {step}, the buffer has {now_trained}: buffer and checkpoint do not match"
                )
            return cur.rowcount + unskipped

        return self._write(rewind)

    def delete_explored_after(self, explore_step: int) -> int:
        """Drop untrained experiences from explore steps after `explore_step` (to re-explore them)."""

        def delete(conn: sqlite3.Connection) -> int:
            trained = conn.execute(
                "SELECT COUNT(*) FROM experiences WHERE explore_step > ? AND train_step IS NOT NULL",
                (explore_step,),
            ).fetchone()[0]
            if trained:
                raise ValueError(
                    f"{self.path}: {trained} experiences of explore steps after {explore_step} "
                    "are already trained; restore the read position first"
                )
            conn.execute("DELETE FROM explore_rounds WHERE explore_step > ?", (explore_step,))
            return conn.execute(
                "DELETE FROM experiences WHERE explore_step > ?", (explore_step,)
            ).rowcount

        return self._write(delete)

    # -- inspection --------------------------------------------------------------------------------

    def count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM experiences")[0][0])

    def count_untrained(self) -> int:
        """Experiences neither trained nor skipped: what the trainer has still to take."""
        return int(self._query("SELECT COUNT(*) FROM experiences WHERE train_step IS NULL AND skipped_step IS NULL"
                               " AND dropped_step IS NULL")[0][0])

    def versions(self) -> list[tuple[int, int, int | None]]:
        """(explore step, model version it was sampled with, train step or None) of every experience."""
        return [tuple(row) for row in self._query("SELECT explore_step, model_version, train_step FROM experiences ORDER BY seq")]

    def skipped_eids(self) -> dict[str, int]:
        """eid → the train step that skipped it as too stale."""
        return dict(self._query(
            "SELECT eid, skipped_step FROM experiences WHERE skipped_step IS NOT NULL ORDER BY seq"))

    def dropped_eids(self) -> dict[str, int]:
        """eid → the explore step whose dynamic sampling or experience pipeline dropped it."""
        return dict(self._query(
            "SELECT eid, dropped_step FROM experiences WHERE dropped_step IS NOT NULL ORDER BY seq"))

    def all_dropped(self, explore_step: int) -> bool:
        """True when explore step `explore_step` stored experiences and dropped every one of them."""
        (stored, dropped), = self._query(
            "SELECT COUNT(*), COALESCE(SUM(dropped_step IS NOT NULL), 0) FROM experiences WHERE explore_step = ?",
            (explore_step,))
        return stored > 0 and stored == dropped

    def taskset_batches_before(self, explore_step: int) -> int:
        """Taskset batches the explore steps before `explore_step` read: one each, or what dynamic sampling
        recorded for it. Where the next step's tasks start, whatever the steps drew."""
        (extra,), = self._query("SELECT COALESCE(SUM(batches - 1), 0) FROM explore_rounds WHERE explore_step < ?",
                                (explore_step,))
        return max(explore_step - 1, 0) + int(extra)

    def experiences(self, train_step: int | None = None) -> list[Experience]:
        """Every stored experience in insertion order, or only those trained by `train_step`."""
        where, params = ("WHERE train_step = ?", (train_step,)) if train_step is not None else ("", ())
        return [Experience(**json.loads(data)) for (data,) in self._query(f"SELECT data FROM experiences {where} ORDER BY seq", params)]

    def all_eids(self) -> list[str]:
        """Every stored eid, in insertion order."""
        return [eid for (eid,) in self._query("SELECT eid FROM experiences ORDER BY seq")]

    def trained_eids(self) -> dict[str, int]:
        """eid → train step, for every trained experience (what "trained exactly once" checks)."""
        return dict(
            self._query(
                "SELECT eid, train_step FROM experiences WHERE train_step IS NOT NULL ORDER BY seq"
            )
        )

    def explored_tokens(self, explore_step: int) -> dict[str, float]:
        """What explore step `explore_step` sampled, as the explore step's metrics name it (tasks/explore.py):
        the usage ledger of a trainer that runs beside the explorer (tracking/usage.py)."""
        (sampled, prompt), = self._query(
            "SELECT COALESCE(SUM(json_array_length(data, '$.response_token_ids')), 0), "
            "COALESCE(SUM(json_array_length(data, '$.prompt_token_ids')), 0) FROM experiences WHERE explore_step = ?",
            (explore_step,),
        )
        return {"explore/tokens_sampled": float(sampled), "explore/tokens_prompt": float(prompt)}

    def task_outcomes(self, first_step: int, last_step: int) -> list[tuple[int, str, float, float | None]]:
        """(explore step, task id, reward, accuracy or None) of every experience explore steps first_step to
        last_step stored, dropped ones too, in order: what an adaptive task selector learns from (buffer/selector_state.py)."""
        rows = self._query(
            "SELECT explore_step, task_id, reward, json_extract(data, '$.reward_breakdown.accuracy') FROM experiences "
            "WHERE explore_step BETWEEN ? AND ? ORDER BY seq", (first_step, last_step))
        return [(int(s), str(t), float(r), None if a is None else float(a)) for s, t, r, a in rows]

    def max_explore_step(self) -> int:
        """The latest explore step with stored experiences (-1 when empty)."""
        (step,), = self._query("SELECT MAX(explore_step) FROM experiences")
        return -1 if step is None else int(step)

    def reward_stats(
        self, *, explore_step: int | None = None, train_step: int | None = None
    ) -> dict[str, float]:
        """count, mean, std (population), min and max of rewards, optionally for one step."""
        where, params = [], []
        if explore_step is not None:
            where.append("explore_step = ?")
            params.append(explore_step)
        if train_step is not None:
            where.append("train_step = ?")
            params.append(train_step)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        (n, mean, mean_sq, lo, hi), = self._query(
            "SELECT COUNT(*), AVG(reward), AVG(reward * reward), MIN(reward), MAX(reward) "
            f"FROM experiences{clause}",
            params,
        )
        if not n:
            return {"count": 0, "mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
        std = math.sqrt(max(mean_sq - mean * mean, 0.0))
        return {"count": int(n), "mean": float(mean), "std": std, "min": float(lo), "max": float(hi)}
