"""The one error the format core raises.

    GraphFormatError(ValueError)   a file or an array breaks the TpuGraphs format

It names where (``source``: a file path, or a request field), which key, and the
problem, so a CLI can print it and the service can map it to a 4xx with ``field``.
"""

from __future__ import annotations


class GraphFormatError(ValueError):
    def __init__(self, key: str, problem: str, source: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {problem}")

    def with_source(self, source: str) -> GraphFormatError:
        return GraphFormatError(self.key, self.problem, source)
