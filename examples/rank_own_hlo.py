"""Rank XLA:CPU option sets for your own JAX program with ``CostModelClient``.

    costmodel serve &                       # the shipped models on 127.0.0.1:8000
    python examples/rank_own_hlo.py [--server URL]
    costmodel rank examples/rank_own_hlo.py:program --configs 32   # the same, CLI

The xla_cpu model reads pre-optimization HLO, what ``jax.jit(f).lower(*args)
.as_text(dialect="hlo")`` prints (XLA:CPU options change what the optimizer does, so
the model sees the program before it). Needs the ``xla`` extra (jax).
"""

from __future__ import annotations

import argparse
from typing import Any

Program = tuple[Any, tuple[Any, ...]]


def program() -> Program:
    """A small MLP layer with a softmax, batch 64: ``(fn, args)``."""
    import jax
    import jax.numpy as jnp

    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (64, 256), jnp.float32)
    w = jax.random.normal(kw, (256, 128), jnp.float32)

    def fn(x: Any, w: Any) -> Any:
        return jax.nn.softmax(jax.nn.relu(x @ w), axis=-1)

    return fn, (x, w)


def main() -> None:
    import jax

    from xla_costmodel.clients import CostModelClient
    from xla_costmodel.tpugraphs import xla_cpu

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    server = parser.parse_args().server
    fn, args = program()
    hlo = jax.jit(fn).lower(*args).as_text(dialect="hlo")  # pre-optimization HLO
    configs = xla_cpu.sample(32, seed=0)  # 32 option sets, row 0 XLA's default
    with CostModelClient(server) as client:
        result = client.rank("xla_cpu", hlo, configs, top_k=3)
    print(f"{result.model}:{result.model_version} graph {result.graph_id[:12]}")
    for place, index in enumerate(result.top_k, 1):
        print(place, index, xla_cpu.to_options(configs[index]) or "(default)")
    print(
        f"adapted {result.adapted}, target_programs {result.target_programs}, "
        f"knowledge_weight {result.knowledge_weight}, prior_weight {result.prior_weight}"
    )


if __name__ == "__main__":
    main()
