"""Collecting the xla_cpu dataset: real programs compiled by XLA:CPU and measured here.

``costmodel collect`` (``make collect``) and the datasheet of what it wrote. Imports
point one way: this package uses the tuner's measuring primitives
(``xla_costmodel.clients.xla``: the timing protocol, the crash journal, the
supervisor), never the reverse. Modules, from the command down::

    collect     the command: options, the supervised child process, CPU pinning
    worker      one collection run in that child (imports jax)
    progress    the progress log, what is still pending, a line per program
    record      one program's files: TpuGraphs npz, HLO text, JSON sidecar
    zoo, plain  the programs (jax and keras imported by their builders only)
    datasheet   DATASHEET.md from the sidecars
"""
