"""Tune a plain JAX function's XLA:CPU options with the service, then apply them.

    costmodel serve &                       # the shipped models on 127.0.0.1:8000
    python examples/tune_and_apply.py [--server URL] [--budget K]

``tune`` compiles and measures the K option sets the service ranks best (the default
among its controls) and keeps one only if it beats the default beyond the noise;
``report.compiler_options`` is then what ``compile(compiler_options=...)`` takes.
Without a service it keeps XLA's default and says why. Needs the ``xla`` extra.
"""

from __future__ import annotations

import argparse
from typing import Any


def main() -> None:
    import jax
    import jax.numpy as jnp

    from xla_costmodel.clients import CostModelClient
    from xla_costmodel.clients.xla.tune import TuneConfig, tune

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    parser.add_argument("--budget", type=int, default=8)
    opts = parser.parse_args()

    def f(x: Any, w: Any) -> Any:
        return jnp.tanh(x @ w).sum(axis=0)

    args = (jnp.ones((256, 512), jnp.float32), jnp.ones((512, 256), jnp.float32))
    with CostModelClient(opts.server) as client:
        report = tune(f, args, TuneConfig(budget=opts.budget), client=client)
    print(f"speedup {report.speedup:.3f}x: {report.compiler_options or '(default)'}")
    print(f"why: {report.reason}")
    options: dict[str, Any] = report.compiler_options  # what compile() takes
    fast = jax.jit(f).lower(*args).compile(compiler_options=options)
    print("same result:", bool(jnp.allclose(fast(*args), jax.jit(f)(*args))))


if __name__ == "__main__":
    main()
