"""What one ``tune`` run is configured with (``TuneConfig``, built once by its
caller: ``costmodel tune``'s options, ``jit``'s ``tune_kwargs``), where its runtimes
belong (``Scope``), the types its parts share, and where its crash journals live."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.xla import decide, policy, spec_rows
from xla_costmodel.clients.xla.measure import TimingProtocol
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2

# A config's options as JSON, the wire and reports spell them (``CompilerOptions.flat``).
Options = dict[str, xla_cpu.OptionValue]
Strategy = Literal["model", "random"]
Log = Callable[[str], None]
Rows = npt.NDArray[np.float32]
# A tuning run measures a handful of executables several times: keep each measurement
# short; rounds stop after 10 s once 3 are done.
TUNE_PROTOCOL = TimingProtocol(runs=3, min_rounds=3, max_rounds=5, budget_s=10.0)


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """Test hooks, passed as arguments (never read from the environment), so a
    test can make XLA's rare failures happen on a tiny program: ``crash_at``
    ``"candidate"`` kills the tuning process with SIGSEGV while it compiles its
    first candidate (once: the restarted run finds it in the crash journal and
    leaves it out), ``"confirm"`` kills the confirmation's child; the fresh
    process's times of the finalist are multiplied by ``config_scale``."""

    crash_at: Literal["candidate", "confirm"] | None = None
    config_scale: float = 1.0


@dataclass(frozen=True)
class TuneConfig:
    """Everything ``tune`` takes besides the program, the client and ``progress``."""

    budget: int = 8
    model: str = "xla_cpu"
    # The rows' spec, by its name in ``compiler_space.SPECS`` (a child process
    # tuning for ``jit`` gets the name and looks it up too: ``spec_rows.spec_named``).
    spec: str = spec_rows.SPEC
    strategy: Strategy = "model"
    seed: int = 0
    rounds: int | None = None  # default min(3, budget)
    candidates: int = 256
    target: str | None = None  # default machine.target()
    controls: int = 2  # separately compiled copies of the default
    confirm: int | None = None  # configs verified at the end (policy.confirm(budget))
    min_gain: float = decide.MIN_GAIN  # a kept config is at least this much faster
    alpha: float = decide.ALPHA  # and faster at this significance (signed ranks)
    repeats: int = decide.MIN_PAIRS  # interleaved pairs per finalist at the first look
    max_pairs: int = decide.MAX_PAIRS  # and at most (decide.Sequential)
    protocol: TimingProtocol = TUNE_PROTOCOL
    deadline: float | None = 30.0  # seconds per service call
    # A config whose output differs more from the default's (max |diff| / max |ref|
    # per output) is treated as failed: it changed the numerics, not just the speed.
    max_rel_diff: float = 1e-3
    # Where each program's crash journal lives (default ``default_crash_dir()``).
    crash_dir: Path | None = None
    # Ask the service what the fleet decided for this program first (``reuse.py``);
    # reuse a decision only when this many distinct writers made it.
    reuse: bool = True
    min_writers: int = 1
    # Rounds of the finalist's confirmation in a fresh process (confirm.py).
    confirm_rounds: int = 7
    hooks: Hooks = Hooks()

    def __post_init__(self) -> None:
        spec_rows.spec_named(self.spec)  # ValueError: no such spec
        if self.strategy not in ("model", "random"):
            raise ValueError(f"strategy must be model or random, not {self.strategy!r}")
        if not 1 <= self.budget < self.candidates:
            raise ValueError(
                f"budget must be in [1, candidates - 1 = {self.candidates - 1}], "
                f"got {self.budget}"
            )
        if not 2 <= self.controls <= 4:
            raise ValueError("controls must be 2..4: their disagreement is the noise")
        if self.confirm is not None and self.confirm < 1:
            raise ValueError("confirm must be >= 1")
        if self.repeats < 2:
            raise ValueError("repeats must be >= 2: a test needs a sample")
        if self.max_pairs < self.repeats:
            raise ValueError("max_pairs must be >= repeats")
        if self.min_writers < 1:
            raise ValueError("min_writers must be >= 1")
        if self.confirm_rounds < 7:
            raise ValueError("confirm_rounds must be >= 7: fewer cannot say faster")

    @property
    def finalists(self) -> int:
        """How many configs the final decision verifies."""
        return policy.confirm(self.budget) if self.confirm is None else self.confirm

    def plan(self) -> list[policy.Round]:
        """The rounds (``policy.plan``): the portfolio first, then the ranking."""
        return policy.plan(self.budget, self.rounds)


@dataclass(frozen=True)
class Scope:
    """Where a run's runtimes belong: its configuration, the target they are sent
    under (``cfg.target`` or this CPU's) and the compiler that measured them."""

    cfg: TuneConfig
    target: str
    compiler: str


def config_to_json(cfg: TuneConfig) -> dict[str, Any]:
    """``cfg`` as JSON, for a tuning run in a child process (``jit_tuning.tune_job``)."""
    body = asdict(cfg)
    body["crash_dir"] = None if cfg.crash_dir is None else str(cfg.crash_dir)
    return body


def config_from_json(body: dict[str, Any]) -> TuneConfig:
    """``config_to_json``'s inverse."""
    fields = dict(body)
    fields["protocol"] = TimingProtocol(**fields["protocol"])
    fields["hooks"] = Hooks(**fields["hooks"])
    if fields["crash_dir"] is not None:
        fields["crash_dir"] = Path(fields["crash_dir"])
    return TuneConfig(**fields)


def default_crash_dir() -> Path:
    """``$XDG_CACHE_HOME/costmodel/tune`` (``~/.cache/costmodel/tune``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "costmodel" / "tune"


def config_key(row: npt.ArrayLike) -> int:
    """A config row's bits as one integer: its name in a crash journal, the same
    whatever sample it was drawn in. An ``xla_cpu/2`` row with the loop threshold at
    its default is named as its ``xla_cpu/1`` row was: a journal written before the
    threshold existed still names the configs that crashed."""
    arr = np.asarray(row, np.float32)
    if arr.shape == (xla_cpu2.WIDTH,):
        older = xla_cpu2.downgrade(arr)
        arr = arr if older is None else older
    bits = arr.astype(np.int64)
    return int(bits @ (1 << np.arange(bits.size, dtype=np.int64)))
