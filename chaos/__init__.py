"""The chaos run behind ``costmodel chaos``: faults under load, on loopback.

``cli.chaos`` is the entry point; ``harness.run`` starts Redis, PostgreSQL and
``costmodel serve`` (``xla_costmodel.harness``), keeps client threads going
(``load``) while the faults of ``faults`` happen in turn (``ray_phase``: the optional
Ray Serve replica kill), and checks that no acknowledged feedback was lost.

It runs from a clone: the process harness is not in the wheel or the image
(``xla_costmodel.bench.require_harness`` is the check that says so in one line).
"""
