"""Fuzzed HLO text: always a valid graph or an HloParseError naming a line.

Mutants of real texts (truncations, garbage lines, deleted or swapped characters)
must never surface an IndexError, KeyError, ValueError or the like.
"""

from __future__ import annotations

import random
import re
import string
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.tpugraphs.hlo import HloParseError, featurize_hlo

SHARED = Path(__file__).resolve().parents[2] / "datasets" / "tpugraphs"
SOURCES = sorted((SHARED / "hlo" / "tile").glob("*.hlo.txt")) + [
    SHARED / "hlo" / "jax" / name
    for name in ("mlp_infer.pre.hlo.txt", "transformer_layer_infer.hlo.txt")
]
SEED = 20261122
MUTANTS_PER_SOURCE = 40
GARBAGE = [
    "}",
    "{",
    ")",
    "ROOT",
    "ENTRY %e {",
    "HloModule again",
    "%x = f32[2 add(%y)",
    '%s = f32[] constant(0), metadata={op_name="unterminated}',
    "/* open comment",
    "%t = (f32[], /*index=1*/ s32[] parameter(0)",
    "%w = f32[2]{1,0:T(8 copy(%a)",
    "%u = f32[] add(%nope, %nope)",
    "%c = f32[9999999999999999999999] parameter(0)",
    "  %dup = f32[] parameter(0)\n  %dup = f32[] parameter(1)",
    "StackFrames",
    "%q = f32[] fusion(), calls=%missing",
    "%r = f32[] reduce(), window={size=2x}",
]
INSTRUCTION = re.compile(
    r"^(\s*(?:ROOT )?%?[\w.\-]+ = )([a-z]\w*)(\[[^\]]*\][^ ]* )([\w\-]+)\(", re.M
)


def _mutants(text: str, rng: random.Random) -> list[tuple[str, str]]:
    lines = text.split("\n")
    out = []
    for _ in range(MUTANTS_PER_SOURCE):
        kind = rng.choice(["truncate", "garbage", "random", "delete", "swap", "dup"])
        at = rng.randrange(len(text))
        line = rng.randrange(len(lines))
        if kind == "truncate":
            mutant = text[:at]
        elif kind in ("garbage", "random"):
            junk = (
                rng.choice(GARBAGE)
                if kind == "garbage"
                else "".join(
                    rng.choice(string.printable[:-5])
                    for _ in range(rng.randrange(1, 40))
                )
            )
            mutant = "\n".join([*lines[:line], junk, *lines[line:]])
        elif kind == "delete":
            mutant = text[:at] + text[at + 1 :]
        elif kind == "swap":
            j = rng.randrange(len(text))
            chars = list(text)
            chars[at], chars[j] = chars[j], chars[at]
            mutant = "".join(chars)
        else:
            mutant = "\n".join([*lines[: line + 1], *lines[line:]])
        out.append((kind, mutant))
    return out


def _outcome(text: str) -> str:
    """'graph' or 'error'; fails the test on anything but HloParseError."""
    try:
        graph = featurize_hlo(text, configurable=None)
    except HloParseError as err:
        assert 1 <= err.line <= text.count("\n") + 1
        assert str(err).startswith(f"line {err.line}: expected ")
        return "error"
    g = graph.to_graph()
    assert g.num_nodes == len(graph.node_names)
    assert graph.node_splits[0] == 0 and graph.node_splits[-1] == g.num_nodes
    return "graph"


def test_fuzzed_texts_give_a_graph_or_a_located_parse_error() -> None:
    rng = random.Random(SEED)
    outcomes = []
    for source in SOURCES:
        for i, (kind, mutant) in enumerate(_mutants(source.read_text(), rng)):
            try:
                outcomes.append(_outcome(mutant))
            except Exception as exc:  # report which mutant broke, then fail
                pytest.fail(
                    f"{source.name} mutant {i} ({kind}): {type(exc).__name__}: {exc}"
                )
    # Both outcomes occur, so neither branch passes vacuously.
    assert outcomes.count("graph") > 50 and outcomes.count("error") > 50


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_unknown_opcode_gets_id_zero_and_changes_nothing_else(source: Path) -> None:
    text = source.read_text()
    rng = random.Random(f"{SEED}{source.name}")
    plain = [
        m for m in INSTRUCTION.finditer(text) if m.group(4) not in _OPCODE_FEATURES
    ]
    m = rng.choice(plain)
    mutant = text[: m.start(4)] + "frobnicate-op" + text[m.end(4) :]
    before, after = featurize_hlo(text, None), featurize_hlo(mutant, None)
    node = after.node_names.index(m.group(0).split("=")[0].split()[-1].lstrip("%"))
    assert after.node_opcode[node] == 0
    assert np.array_equal(
        np.delete(after.node_opcode, node), np.delete(before.node_opcode, node)
    )
    assert np.array_equal(after.node_feat, before.node_feat)
    assert np.array_equal(after.edge_index, before.edge_index)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_unknown_element_type_gets_an_all_zero_one_hot(source: Path) -> None:
    text = source.read_text()
    m = random.Random(f"{SEED}{source.name}").choice(list(INSTRUCTION.finditer(text)))
    mutant = text[: m.start(2)] + "f8e4m3fnuz" + text[m.end(2) :]
    before, after = featurize_hlo(text, None), featurize_hlo(mutant, None)
    node = after.node_names.index(m.group(0).split("=")[0].split()[-1].lstrip("%"))
    assert not after.node_feat[node, 2:21].any()
    expected = before.node_feat.copy()
    expected[node, 2:21] = 0
    assert np.array_equal(after.node_feat, expected)


# Opcodes whose features depend on the opcode itself (group-count defaults, pad,
# iota, parameter and constant parsing), so renaming them changes more than the id.
_OPCODE_FEATURES = {
    "convolution",
    "custom-call",
    "pad",
    "iota",
    "parameter",
    "constant",
}
