"""A JAX program shipped to another process: ``jax.export`` of it and its arguments.

    ship(fn, args) -> dict[str, bytes]      the files a child needs (``isolate.call``)
    load(workdir) -> (fn, args)             in the child: ``exported.call`` and args

The caller's process holds ``fn`` and its arguments; a child cannot import them (a
closure, a notebook cell). ``ship`` serializes ``jax.export.export(jax.jit(fn))``
(the program's StableHLO, portable between processes of one jaxlib) and the
arguments' leaves as raw bytes with their dtypes and shapes (bfloat16 too; a typed
PRNG key as its key data and implementation, rewrapped in the child); ``load``
deserializes them, and the child compiles ``jax.jit(exported.call)`` with whatever
options it is asked to. XLA inlines the call, so the executables are the caller's.
The child lowers a wrapper module, so its HLO text and fingerprint differ from the
caller's: ``jit_tuning.tune_job`` names the program by the caller's. jax is
imported when these run, never at import.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PROGRAM = "program.jaxexport"
ARGS = "args.npz"
LEAVES = "leaves.json"


def ship(fn: Callable[..., Any], args: Sequence[Any]) -> dict[str, bytes]:
    """``fn(*args)`` as files for a child process (module docstring)."""
    import jax
    import jax.numpy as jnp
    from jax import export

    exported = export.export(jax.jit(fn))(*args)
    leaves, meta = [], []
    for x in jax.tree.leaves(tuple(args)):
        # A typed PRNG key has no numpy form: ship its data, rewrap it in the child.
        is_key = jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
        data = np.asarray(jax.random.key_data(x) if is_key else x)
        leaves.append(data)
        meta.append(
            {"dtype": str(data.dtype), "shape": list(data.shape)}
            | ({"key_impl": str(jax.random.key_impl(x))} if is_key else {})
        )
    raw = io.BytesIO()
    np.savez(raw, *[np.ascontiguousarray(x).view(np.uint8).ravel() for x in leaves])
    return {
        PROGRAM: bytes(exported.serialize()),
        ARGS: raw.getvalue(),
        LEAVES: json.dumps(meta).encode(),
    }


def load(workdir: Path) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """In the child: the shipped program (``exported.call``) and its arguments."""
    import jax
    import jax.numpy as jnp
    from jax import export

    exported = export.deserialize(bytearray((workdir / PROGRAM).read_bytes()))
    meta = json.loads((workdir / LEAVES).read_text())
    with np.load(workdir / ARGS) as raw:
        leaves = [
            jnp.asarray(
                np.frombuffer(raw[f"arr_{i}"].tobytes(), jnp.dtype(m["dtype"])).reshape(
                    m["shape"]
                )
            )
            for i, m in enumerate(meta)
        ]
    leaves = [
        jax.random.wrap_key_data(x, impl=m["key_impl"]) if "key_impl" in m else x
        for x, m in zip(leaves, meta, strict=True)
    ]
    args, _ = jax.tree.unflatten(exported.in_tree, leaves)
    return exported.call, tuple(args)
