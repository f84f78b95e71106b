"""Which failures a retry can fix: a part that died or a service that timed out, not a wrong setting.

Tasks retry (Prefect `retry_condition_fn`) only when `is_transient(error)`; a `ConfigError` (a setting,
a file, a line of data) fails the run at once, its message naming the field or the file.

Ray's exceptions are recognised by class name, so nothing here imports Ray (tasks may use this module).
"""

from __future__ import annotations

import errno


class ConfigError(ValueError):
    """A setting, a file or a line of data is wrong: retrying cannot help. `field` is the setting
    (dotted path or environment variable) the message starts with."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message if message.startswith(field) else f"{field}: {message}")


class TransientError(RuntimeError):
    """A part died or a service did not answer in time: a retry (after a revival) may succeed."""


class PartLost(TransientError, LookupError):
    """A named part (an engine or the trainer) is not running any more."""


# Ray's errors of a died actor, a lost node or object, a timeout (ray.exceptions).
RAY_TRANSIENT = {
    "RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "LocalRayletDiedError",
    "NodeDiedError", "ObjectLostError", "OwnerDiedError", "ObjectFetchTimedOutError", "ObjectReconstructionFailedError",
    "GetTimeoutError", "OutOfMemoryError", "RayChannelTimeoutError",
}
# Network errors of HTTP clients that do not derive from the builtin ConnectionError / TimeoutError.
HTTP_TRANSIENT = {
    ("requests.exceptions", "ConnectionError"), ("requests.exceptions", "Timeout"),
    ("urllib3.exceptions", "ProtocolError"), ("urllib3.exceptions", "MaxRetryError"),
    ("urllib3.exceptions", "TimeoutError"), ("httpx", "TransportError"),
}
TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE, errno.EHOSTUNREACH}


def _causes(error: BaseException) -> list[BaseException]:
    """The error and what it wraps (__cause__, __context__, Ray's `cause`), outermost first."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop(0)
        if current is None or any(current is s for s in seen) or len(seen) > 20:
            continue
        seen.append(current)
        todo += [current.__cause__, current.__context__, getattr(current, "cause", None)]
    return [e for e in seen if isinstance(e, BaseException)]


def _is_transient_one(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    if names & RAY_TRANSIENT:
        # An actor whose constructor raised died of its arguments (a bad model path...), not by accident.
        return not getattr(error, "actor_init_failed", False)
    if isinstance(error, (TransientError, ConnectionError, TimeoutError)):
        return True
    if isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS:
        return True
    modules = {(cls.__module__.split("._")[0], cls.__name__) for cls in type(error).__mro__}
    return bool(modules & HTTP_TRANSIENT)


def is_transient(error: BaseException) -> bool:
    """True when a retry may fix `error`: it is (or wraps) a died actor, a reset connection or a
    timeout, and nothing in it is a ConfigError."""
    chain = _causes(error)
    if any(isinstance(e, ConfigError) for e in chain):
        return False
    return any(_is_transient_one(e) for e in chain)
