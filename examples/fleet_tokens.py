"""A fleet: two tuners on two programs, one shared service, one writer token each.

    costmodel tokens create tuner-1 | tail -1    # on the service's database; once
    costmodel tokens create tuner-2 | tail -1
    python examples/fleet_tokens.py --server URL --tokens TOKEN1,TOKEN2 [--budget K]

Each tuner sends its measurements as its own writer (the service requires a token
when it listens beyond loopback: docs/security.md), so the second program's ranking
already knows what the first measured on this CPU (``target_programs`` grows); at
the end, ``GET /v1/targets`` says what the fleet gained. Needs the ``xla`` extra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fleet_programs beside us

PROGRAMS = ("lenet", "mlp_mnist")


def main() -> None:
    import fleet_programs

    from xla_costmodel.clients import CostModelClient
    from xla_costmodel.clients.xla.tune import TuneConfig, tune

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    parser.add_argument("--tokens", required=True, help="TOKEN1,TOKEN2")
    parser.add_argument("--budget", type=int, default=4)
    opts = parser.parse_args()
    tokens = opts.tokens.split(",")
    for name, token in zip(PROGRAMS, tokens, strict=True):
        fn, args = getattr(fleet_programs, name)()
        with CostModelClient(opts.server, token=token) as client:
            report = tune(fn, args, TuneConfig(budget=opts.budget), client=client)
        stored = sum(r.feedback_stored or 0 for r in report.rounds)
        shaping = report.rounds[0].shaping if report.rounds else None
        knew = None if shaping is None else shaping.target_programs
        print(
            f"{name}: speedup {report.speedup:.3f}x, {stored} measurements stored, "
            f"target_programs {knew} before its first round"
        )
    fleet = httpx.get(f"{opts.server}/v1/targets", timeout=10).json()
    print("GET /v1/targets:", fleet)


if __name__ == "__main__":
    main()
