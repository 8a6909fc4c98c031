"""``python -m benchmarks [--quick] [--json]``: the same command as ``costmodel bench``."""

from __future__ import annotations

import typer

from xla_costmodel.benchmarks.cli import bench


def main() -> None:
    typer.run(bench)


if __name__ == "__main__":
    main()
