"""The error the HLO text featurizer raises for malformed text.

    GraphFormatError(ValueError)     xla_costmodel.tpugraphs.errors
    └── HloParseError                the text is not HLO we can read; carries ``line``

Subclassing GraphFormatError lets the CLI and the service treat a bad HLO upload like
any other bad graph, while ``line`` points the user at the offending text.
"""

from __future__ import annotations

from xla_costmodel.tpugraphs.errors import GraphFormatError


class HloParseError(GraphFormatError):
    """Malformed HLO text: ``str(err)`` reads ``line N: expected X, got Y``."""

    def __init__(self, line: int, problem: str, source: str | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}", problem, source)

    @classmethod
    def expected(cls, line: int, what: str, got: str) -> HloParseError:
        return cls(line, f"expected {what}, got {got}")

    def with_source(self, source: str) -> HloParseError:
        return HloParseError(self.line, self.problem, source)
