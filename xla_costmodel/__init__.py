"""xla-costmodel: a learned cost-model service for XLA autotuners.

One import namespace; the repository's folders map onto it (``pyproject.toml``):

    xla_costmodel              this folder: the artifact contract and the CLI
    xla_costmodel.tpugraphs    tpugraphs/   numpy-only format core
    xla_costmodel.clients      clients/     the client an autotuner imports
    xla_costmodel.collection   collection/  xla_cpu dataset   (extra: xla)
    xla_costmodel.service      service/     the server        (extra: service)
    xla_costmodel.models       models/      training, export  (extra: train)
    xla_costmodel.bench        bench/       make bench        (extra: bench)
    xla_costmodel.chaos        chaos/       make chaos        (extra: bench)
    xla_costmodel.studies      studies/     research studies  (extra: bench)
    xla_costmodel.harness      harness/     the processes tests and runs start

The base install is the client (numpy, httpx) plus what the ``costmodel`` command
needs (typer, rich); nothing here imports more at import time.
"""

from __future__ import annotations

from pathlib import Path

DISTRIBUTION = "xla-costmodel"


def version() -> str:
    """The installed distribution's version (single source: ``pyproject.toml``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def shipped_models() -> Path:
    """The shipped artifacts (``models/artifacts``): package data of
    ``xla_costmodel.models``, found through the import system wherever it was
    installed (a checkout, a wheel, an sdist built into a wheel)."""
    from importlib.resources import files

    return Path(str(files("xla_costmodel.models") / "artifacts"))
