"""Turn a pydantic ValidationError into lines "dotted.field.path: what is wrong"."""

from __future__ import annotations

from pydantic import ValidationError

from schemas.base import ConfigRuleError


def error_items(exc: ValidationError) -> list[tuple[str, str]]:
    """(path, message) pairs; cross-field rule errors contribute one pair per broken rule."""
    out: list[tuple[str, str]] = []
    for err in exc.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigRuleError):
            out.extend(inner.problems)
            continue
        path = ".".join(str(p) for p in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown setting (not a field of this section)"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        out.append((path or "<config>", msg))
    return out


def describe_errors(exc: ValidationError) -> list[str]:
    """Human-readable lines, one per problem."""
    return [f"{path}: {msg}" for path, msg in error_items(exc)]
