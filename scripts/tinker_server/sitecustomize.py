"""Imported by every python of the tinker server's own venv (scripts/tinker-server.sh copies it there).

1. skyrl 0.3.0 declares a `typing.TypedDict` inside a pydantic model, which pydantic refuses on
   Python < 3.12 ("Please use typing_extensions.TypedDict"): hand out typing_extensions' instead.
2. TINKER_SERVER_PROTO_SHIM=1 (set for the server): every FastAPI app gets the middleware in
   tinker_proto_shim, so that tinker 0.38 clients can talk to skyrl 0.3.0.
3. TINKER_SERVER_SUM_LOSS=1 (set for the server): the JAX engine reduces losses as the hosted
   service does, a plain sum over datums and tokens of weight x per-token loss, which is what the
   SDK's forward_backward_custom relies on (it sends weights = -dLoss/dlogprobs, whatever their sign).
   skyrl 0.3.0 instead divides each sequence's loss by the sum of its weights (clamped at 1e-9) and
   the accumulated gradient by the number of sequences: a different scale for built-in losses, and
   gradients blown up ~1e9 times for custom losses whose weights sum to <= 0.
"""

import os
import sys

if sys.version_info < (3, 12):
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

if os.environ.get("TINKER_SERVER_PROTO_SHIM") == "1":
    import fastapi

    _init = fastapi.FastAPI.__init__

    def _init_with_shim(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _init(self, *args, **kwargs)
        from tinker_proto_shim import TinkerProtoShim

        self.add_middleware(TinkerProtoShim)

    fastapi.FastAPI.__init__ = _init_with_shim  # type: ignore[method-assign]

if os.environ.get("TINKER_SERVER_SUM_LOSS") == "1":
    import importlib.abc
    import importlib.machinery

    # (module, text in skyrl 0.3.0, replacement): each text must occur exactly once.
    _PATCHES = [
        (
            "skyrl.backends.jax",
            "per_seq_loss = per_token_losses.sum(axis=-1) / jnp.maximum(loss_mask.sum(axis=-1), 1e-9)",
            "per_seq_loss = per_token_losses.sum(axis=-1)",
        ),
        (
            "skyrl.backends.jax",
            "return jnp.zeros_like(g).at[idx].set(g[idx] / safe_count.astype(g.dtype))",
            "return jnp.zeros_like(g).at[idx].set(g[idx])",
        ),
    ]

    class _PatchedLoader(importlib.machinery.SourceFileLoader):
        def get_code(self, fullname):  # type: ignore[no-untyped-def]
            with open(self.path, encoding="utf-8") as f:
                source = f.read()
            for module, old, new in _PATCHES:
                if module == fullname:
                    if source.count(old) != 1:
                        raise ImportError(f"tinker server: cannot patch {fullname}: {old!r} not found once")
                    source = source.replace(old, new)
            return compile(source, self.path, "exec", dont_inherit=True)

    class _PatchFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
            if fullname not in {module for module, _, _ in _PATCHES}:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.origin:
                spec.loader = _PatchedLoader(fullname, spec.origin)
            return spec

    sys.meta_path.insert(0, _PatchFinder())
