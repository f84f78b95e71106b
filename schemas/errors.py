"""Turn a pydantic ValidationError into lines "dotted.field.path: what is wrong"."""

from __future__ import annotations

from pydantic import ValidationError

from schemas.base import NOT_HERE_ERROR, ConfigRuleError

# Sections that are tagged unions: pydantic puts the chosen tag into an error's location
# (trainer.torch.dtype); users name the setting without it (trainer.dtype).
TAGGED_SECTIONS = {"trainer": "trainer_type", "rollout_model": "engine_type"}


def _without_tags(loc: tuple) -> tuple[list[str], str | None]:
    """The location without a union tag, and e.g. "trainer_type 'torch'" when the error is in a variant."""
    from schemas.explorer import ENGINE_TYPES
    from schemas.trainer import TRAINER_TYPES

    values = {"trainer_type": TRAINER_TYPES, "engine_type": ENGINE_TYPES}
    out: list[str] = []
    variant = None
    for part in loc:
        owner = out[-2] if len(out) > 1 and out[-1].isdigit() else (out[-1] if out else "")
        tag = TAGGED_SECTIONS.get(owner)
        if tag and variant is None and part in values[tag]:
            variant = f"{tag} {part!r}"
            continue
        out.append(str(part))
    return out, variant


def error_items(exc: ValidationError) -> list[tuple[str, str]]:
    """(path, message) pairs; cross-field rule errors contribute one pair per broken rule."""
    out: list[tuple[str, str]] = []
    for err in exc.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigRuleError):
            out.extend(inner.problems)
            continue
        parts, variant = _without_tags(err["loc"])
        path = ".".join(parts)
        msg = err["msg"]
        if err["type"] == NOT_HERE_ERROR:  # a key the section does not have, and why (Section.NOT_HERE)
            ctx = err.get("ctx") or {}
            path, msg = ".".join([*parts, ctx["key"]]), ctx["why"]
        elif err["type"] == "extra_forbidden":
            msg = f"not a setting of {variant}" if variant else "unknown setting (not a field of this section)"
        elif err["type"] == "union_tag_invalid":
            tag = (err.get("ctx") or {}).get("discriminator", "").strip("'")
            ctx = err.get("ctx") or {}
            path, msg = f"{path}.{tag}", f"{ctx.get('tag')!r} is not one of {ctx.get('expected_tags')}"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        out.append((path or "<config>", msg))
    return out


def describe_errors(exc: ValidationError) -> list[str]:
    """Human-readable lines, one per problem."""
    return [f"{path}: {msg}" for path, msg in error_items(exc)]
