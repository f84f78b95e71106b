"""A real `mlflow server` on 127.0.0.1 over a SQLite store, stopped and started again on the same store and
port (what an outage of the tracking server looks like to a run)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MLFLOW = str(Path(sys.executable).parent / "mlflow")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with its store in {root}/mlflow.db, artifacts in {root}/artifacts."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.store = f"sqlite:///{self.root / 'mlflow.db'}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", self.store, "--artifacts-destination", str(self.root / "artifacts")],
            stdout=open(self.root / "mlflow.log", "a"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("mlflow server did not start: " + (self.root / "mlflow.log").read_text()[-2000:])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL: beside another pytest worker the server once took over 60 s to shut down
        gracefully (its clients keep connections open); an outage need not be graceful."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
            self.proc = None
