"""TpuGraphs format core: constants, validated arrays, the npz reader and the graph hash.

Depends on numpy only, so the service, the client and the training code all share one
definition of what a valid graph is and one canonical ``graph_id``.
"""
