"""Research studies and simulations on the real data and the real service.

``adaptation``: the method study behind ``tpugraphs.adapt`` and its defaults;
``learning`` (with ``learning_tile``, ``learning_layout``, ``learning_timing``,
``learning_report``): per-graph adaptation measured end to end; ``fleet``: the fleet
simulation (``costmodel simulate``); ``real_fleet``: real programs tuned one after
another; ``monitoring`` (with ``prometheus``): the recorded series of a simulated
fleet, plotted. Each writes to ``studies/results/`` (studies/README.md).

The studies that serve a model (``learning``, ``monitoring`` and ``prometheus``,
``jit_cost``, ``reuse``, ``real_fleet``) run from a clone: the process harness is not in
the wheel or the image (``xla_costmodel.bench.require_harness`` is the check that says
so in one line). ``fleet`` needs none.
"""
