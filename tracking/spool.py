"""MLflow writes that survive an outage: `TrackingClient` keeps them in the experiment's spool file while
the server does not answer, and replays them in order as soon as it answers again.

What may be skipped while the server is down (the curve, the model registry) is wrapped in `best_effort`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from backends.errors import is_transient
from schemas.secrets import redact, without_credentials
from tracking.nesting import settle_parent

SPOOL = "mlflow_spool.jsonl"  # in the experiment's log/ folder; artifacts are copied into mlflow_spool/
# Beside it: the kept calls MLflow refused on replay for a reason that is not an outage (a deleted run, a value it
# rejects), each with its error; their artifacts are moved into mlflow_dead_letter/. Never dropped silently: the
# run's summary and `rft watch` name the file.
DEAD_LETTER = "mlflow_dead_letter.jsonl"


def dead_letter_count(log_dir: Path) -> int:
    """How many MLflow calls of an experiment were refused on replay (its log/ folder's dead-letter file)."""
    path = log_dir / DEAD_LETTER
    return len(path.read_text().splitlines()) if path.is_file() else 0
PROBE_EVERY_S = 5.0  # while the server is down, writes go straight to the spool; its /health is asked this often

# Writes made of several requests, kept and replayed as one step: {name: fn(MlflowClient, *args)}.
STEPS: dict[str, Callable[..., Any]] = {"settle_parent": settle_parent}

logger = logging.getLogger(__name__)
_lock = threading.Lock()  # one writer at a time per process: the spool is replayed in order
_down_since: dict[str, float] = {}  # tracking URI -> when it was last found not answering


_sqlite_ready: set[Path] = set()  # SQLite stores this process has opened (their tables exist)


def _sqlite_client(uri: str) -> MlflowClient:
    """A client on a SQLite store whose tracking and registry tables are made under a lock beside it. MLflow
    creates (and migrates) the tables of a new store when a client first opens it, and two processes doing
    that at once fail ("table ... already exists"): an explore and a train deployment of one experiment start
    together."""
    db = Path(uri.removeprefix("sqlite:///"))
    if db in _sqlite_ready:
        return MlflowClient(tracking_uri=uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        client = MlflowClient(tracking_uri=uri)  # opens the tracking store: its tables
        client.search_registered_models(max_results=1)  # opens the registry store: its tables
    _sqlite_ready.add(db)
    return client


class TrackingClient:
    """An MlflowClient whose writes (`SPOOLED`) never fail a run: while the server does not answer,
    each is appended to a spool file (artifacts copied beside it) with a warning, and the spool is
    replayed in order before the next write once the server answers again. Reads pass through."""

    SPOOLED = ("log_batch", "log_metric", "set_tag", "log_table", "log_artifact", "set_terminated", *STEPS)

    def __init__(self, uri: str, spool: Path) -> None:
        self.uri = uri
        self.spool = spool
        self.client = _sqlite_client(uri) if uri.startswith("sqlite:///") else MlflowClient(tracking_uri=uri)

    def __getattr__(self, name: str) -> Any:
        if name in self.SPOOLED:
            return lambda *args, **kwargs: self._write(name, args, kwargs)
        return getattr(self.client, name)

    def flush(self) -> int:
        """Replay the spool (when the server is not known to be down); returns the calls replayed."""
        with _lock:
            return self._flush()

    def _write(self, name: str, args: tuple, kwargs: dict) -> None:
        with _lock:
            if self._flush() < 0:
                self._keep(name, args, kwargs)
                return
            try:
                self._call(name, args, kwargs)
            except Exception as err:
                if not is_transient(err):
                    raise
                self._went_down(err)
                self._keep(name, args, kwargs)
                return
            _down_since.pop(self.uri, None)

    def _call(self, name: str, args: tuple | list, kwargs: dict) -> None:
        if name in STEPS:
            STEPS[name](self.client, *args, **kwargs)
        else:
            getattr(self.client, name)(*args, **kwargs)

    def _still_down(self) -> bool:
        """Known down and not answering now (its /health asked at most every PROBE_EVERY_S, 2 s timeout)."""
        if self.uri not in _down_since:
            return False
        if time.monotonic() - _down_since[self.uri] < PROBE_EVERY_S:
            return True
        if self.uri.startswith(("http://", "https://")):
            try:
                urllib.request.urlopen(without_credentials(self.uri).rstrip("/") + "/health", timeout=2).close()
            except urllib.error.HTTPError as err:
                if err.code >= 500:
                    _down_since[self.uri] = time.monotonic()
                    return True
            except OSError:
                _down_since[self.uri] = time.monotonic()
                return True
        return False

    def _went_down(self, err: BaseException) -> None:
        if self.uri not in _down_since:
            warn(f"MLflow at {redact(self.uri)} does not answer ({type(err).__name__}): its writes are kept in {self.spool} "
                 "and logged when it answers again; training goes on")
        _down_since[self.uri] = time.monotonic()

    def _keep(self, name: str, args: tuple, kwargs: dict) -> None:
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        if name == "log_artifact":  # the file may be temporary: keep a copy
            source = Path(kwargs.pop("local_path", None) or args[1])
            kept = self.spool.parent / "mlflow_spool" / uuid.uuid4().hex[:8] / source.name
            kept.parent.mkdir(parents=True)
            shutil.copyfile(source, kept)
            args = (args[0], str(kept), *args[2:])
        line = {"call": name, "args": [_encode(a) for a in args], "kwargs": {k: _encode(v) for k, v in kwargs.items()}}
        with self.spool.open("a") as fh:
            fh.write(json.dumps(line) + "\n")

    def _flush(self) -> int:
        """-1: the server is still down (the spool stays); else how many kept calls were replayed."""
        if self._still_down():
            return -1
        if not self.spool.is_file():
            return 0
        lines = self.spool.read_text().splitlines()
        for i, line in enumerate(lines):
            call = json.loads(line)
            try:
                self._call(call["call"], [_decode(a) for a in call["args"]], {k: _decode(v) for k, v in call["kwargs"].items()})
            except Exception as err:
                if is_transient(err):
                    self._went_down(err)
                    self.spool.write_text("".join(rest + "\n" for rest in lines[i:]))
                    return -1
                self._dead_letter(call, err)
        self.spool.unlink()
        shutil.rmtree(self.spool.parent / "mlflow_spool", ignore_errors=True)
        _down_since.pop(self.uri, None)
        warn(f"MLflow at {redact(self.uri)} answers again: {len(lines)} kept call(s) logged")
        return len(lines)


    def _dead_letter(self, call: dict[str, Any], err: BaseException) -> None:
        """A kept call MLflow refused (not an outage): into the dead-letter file with its error, its artifact moved
        out of the spool's folder (removed after a replay), a warning naming the file."""
        dead = self.spool.parent / DEAD_LETTER
        if call["call"] == "log_artifact" and call["args"][1:]:
            source = Path(_decode(call["args"][1]))
            if source.is_file():
                kept = self.spool.parent / "mlflow_dead_letter" / source.parent.name / source.name
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(source, kept)
                call = {**call, "args": [call["args"][0], str(kept), *call["args"][2:]]}
        with dead.open("a") as fh:
            fh.write(json.dumps({**call, "error": f"{type(err).__name__}: {redact(str(err))}"}) + "\n")
        warn(f"MLflow refused a kept call ({call['call']}: {type(err).__name__}); it is kept in {dead}")


def _encode(value: Any) -> Any:
    """A call's argument as JSON (MLflow's Metric and Param entities by their fields; nothing is pickled)."""
    if isinstance(value, Metric):
        return {"__metric__": [value.key, value.value, value.timestamp, value.step]}
    if isinstance(value, Param):
        return {"__param__": [value.key, value.value]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__metric__" in value:
        return Metric(*value["__metric__"])
    if isinstance(value, dict) and "__param__" in value:
        return Param(*value["__param__"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def warn(message: str) -> None:
    """A warning in the Prefect run's log (outside a flow or task run: this module's logger)."""
    try:
        from prefect import get_run_logger

        get_run_logger().warning(message)
    except Exception:  # outside a flow or task run
        logger.warning(message)


def best_effort(fn: Callable[..., Any]) -> Callable[..., Any]:
    """For what may be skipped while the server is down (the curve, the model registry): warn, return None."""

    @wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if not is_transient(err):
                raise
            warn(f"{fn.__name__} skipped: MLflow does not answer ({type(err).__name__})")
            return None

    return call
