"""One live run per experiment directory.

An exclusive `flock` on {experiment_dir}/.run.lock, held by the process running the flow. The kernel
drops it when that process dies, however it dies (SIGKILL too), so a stale lock never blocks a retry.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO

LOCK_FILE = ".run.lock"


class ExperimentBusyError(RuntimeError):
    """Another live process is running this experiment."""


class RunLock:
    def __init__(self, experiment_dir: Path) -> None:
        self.path = experiment_dir / LOCK_FILE
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
                f"experiment {self.path.parent} is already being run by {holder}; wait for it to finish "
                "or cancel it (a crashed run's lock is released with its process)"
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


def hold(experiment_dir: Path, owner: str) -> None:
    """Take the experiment's lock for this process (idempotent), or raise ExperimentBusyError."""
    key = str(experiment_dir.resolve())
    lock = _HELD.get(key) or RunLock(experiment_dir.resolve())
    lock.acquire(owner)
    _HELD[key] = lock


def release(experiment_dir: Path) -> None:
    lock = _HELD.pop(str(experiment_dir.resolve()), None)
    if lock is not None:
        lock.release()
