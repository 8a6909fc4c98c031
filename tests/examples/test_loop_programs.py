"""``examples/loop_programs.py``: every program builds (imported as ``costmodel tune``
imports it), runs at small sizes to finite outputs of the documented shapes, and
gives the same outputs compiled by default and with the loop threshold at 1e9."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
import pytest

from xla_costmodel.clients.xla.compile_options import compile_with
from xla_costmodel.tpugraphs import xla_cpu2

PROGRAMS = Path(__file__).resolve().parents[2] / "examples" / "loop_programs.py"
LOOP_1E9 = xla_cpu2.CompilerOptions(
    extra_options={xla_cpu2.THRESHOLD_KEY: str(xla_cpu2.THRESHOLD_LEVELS[-1])}
)

# Each program at a small size (seconds of compiling, milliseconds of running) and
# the shapes of its outputs at that size.
SMALL: dict[str, tuple[dict[str, Any], dict[str, tuple[int, ...]]]] = {
    "dopri_vdp": (
        {"members": 8, "t_end": 5.0},
        {"y": (2, 8), "accepted": (), "rejected": ()},
    ),
    "implicit_robertson": (
        {"members": 8, "steps": 40},
        {"y": (3, 8), "newton_iterations": ()},
    ),
    "langevin_mb": (
        {"particles": 16, "steps": 50},
        {"mean_x": (2,), "mean_energy": ()},
    ),
    "ising_gibbs": ({"n": 8, "sweeps": 10}, {"magnetisation": (10,), "final": ()}),
    "particle_filter": ({"particles": 32, "steps": 20}, {"loglik": (), "means": (20,)}),
    "lj_verlet": ({"cells": 2, "steps": 20}, {"mean_pe": (), "ke": ()}),
    "adam_logreg": (
        {"samples": 64, "features": 8, "steps": 20},
        {"w": (8,), "loss": ()},
    ),
    "seir": (
        {"members": 8, "days": 30, "substeps": 2},
        {"attack_rate": (8,), "incidence": (30,)},
    ),
    "kalman_tracks": (
        {"tracks": 2, "steps": 20},
        {"state": (2, 6), "loglik": (2,)},
    ),
    "game_of_life": (
        {"n": 8, "generations": 10},
        {"population": (10,), "board": (8, 8)},
    ),
}


@pytest.fixture(scope="module")
def programs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loop_programs", PROGRAMS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_names_are_the_builders_and_each_defaults_to_a_program(
    programs: ModuleType,
) -> None:
    builders = {
        name
        for name, value in vars(programs).items()
        if inspect.isfunction(value)
        and value.__module__ == programs.__name__
        and not name.startswith("_")
    }
    assert len(programs.NAMES) == len(set(programs.NAMES)) == 10
    assert set(programs.NAMES) == builders == set(SMALL)
    for name in programs.NAMES:
        fn, args = getattr(programs, name)()  # the default sizes: built, not run
        assert callable(fn) and isinstance(args, tuple), name


@pytest.mark.parametrize("name", sorted(SMALL))
def test_program_runs_and_the_threshold_keeps_its_outputs(
    programs: ModuleType, name: str
) -> None:
    sizes, shapes = SMALL[name]
    fn, args = getattr(programs, name)(**sizes)
    lowered = jax.jit(fn).lower(*args)
    assert "stablehlo.while" in lowered.as_text()
    default = compile_with(lowered, xla_cpu2.CompilerOptions())(*args)
    hoisted = compile_with(lowered, LOOP_1E9)(*args)
    assert {key: np.shape(value) for key, value in default.items()} == shapes
    for key in shapes:
        want = np.asarray(default[key], np.float64)
        assert np.isfinite(want).all(), key
        np.testing.assert_allclose(
            np.asarray(hoisted[key], np.float64),
            want,
            rtol=1e-5,
            atol=1e-6,
            err_msg=key,
        )
