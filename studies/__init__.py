"""Research studies and simulations on the real data and the real service.

``adaptation``: the method study behind ``tpugraphs.adapt`` and its defaults;
``learning`` (with ``learning_tile``, ``learning_layout``, ``learning_timing``,
``learning_report``): per-graph adaptation measured end to end; ``fleet``: the fleet
simulation (``costmodel simulate``); ``real_fleet``: real programs tuned one after
another; ``monitoring`` (with ``prometheus``): the recorded series of a simulated
fleet, plotted. Each writes to ``studies/results/`` (studies/README.md).
"""
