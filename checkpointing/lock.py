"""One live explorer and one live trainer per experiment directory.

An exclusive `flock` on {experiment_dir}/.{role}.lock per role ("explorer", "trainer"), held by the
process running that side (a run in mode both holds both). The kernel drops it when that process dies,
however it dies (SIGKILL too), so a stale lock never blocks a retry.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO

ROLES = ("explorer", "trainer")


class ExperimentBusyError(RuntimeError):
    """Another live process is running this experiment."""


class RunLock:
    def __init__(self, experiment_dir: Path, role: str) -> None:
        self.path = experiment_dir / f".{role}.lock"
        self.role = role
        self._file: IO[str] | None = None

    def acquire(self, owner: str) -> None:
        if self._file is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise ExperimentBusyError(
                f"experiment {self.path.parent}: its {self.role} is already being run by {holder}; wait for it "
                "to finish or cancel it (a crashed run's lock is released with its process)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"owner": owner, "pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


_HELD: dict[str, RunLock] = {}


def hold(experiment_dir: Path, owner: str, roles: tuple[str, ...] = ROLES) -> None:
    """Take the experiment's locks of `roles` for this process (idempotent), or raise
    ExperimentBusyError (then none is held)."""
    taken = []
    try:
        for role in roles:
            key = f"{experiment_dir.resolve()}:{role}"
            lock = _HELD.get(key) or RunLock(experiment_dir.resolve(), role)
            lock.acquire(owner)
            _HELD[key] = lock
            taken.append(role)
    except ExperimentBusyError:
        release(experiment_dir, tuple(taken))
        raise


def release(experiment_dir: Path, roles: tuple[str, ...] = ROLES) -> None:
    for role in roles:
        lock = _HELD.pop(f"{experiment_dir.resolve()}:{role}", None)
        if lock is not None:
            lock.release()
