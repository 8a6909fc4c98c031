"""What each extra must have installed, and the line that says how to install it:
checked by the ``costmodel`` command table (``cli.py``) before it imports a command,
and by commands with optional parts (``serve --ray``).

    missing(extra) -> modules not installed
    install_hint(extra) -> "pip install 'xla-costmodel[extra]'"
    needs(command, extra) -> the one line printed instead of an ImportError
"""

from __future__ import annotations

import importlib.util

from xla_costmodel import DISTRIBUTION

# What each extra must have installed: checked before its commands are imported.
EXTRAS: dict[str, tuple[str, ...]] = {
    "": (),  # the base install
    "service": ("fastapi", "uvicorn", "onnxruntime", "sqlalchemy", "pydantic_settings"),
    "train": ("torch", "onnx", "onnxruntime"),
    "bench": ("matplotlib", "fastapi", "onnxruntime"),
    "xla": ("jax", "keras"),
    # Not an extra: what `costmodel simulate --quick` imports (its full run also needs
    # torch for the model's prior, checked when it runs).
    "simulate": ("onnxruntime", "scipy"),
}
# Requirements that are not one extra: the hint printed instead of install_hint's.
HINTS: dict[str, str] = {
    "simulate": "pip install 'xla-costmodel[train,xla]' "
    "(--quick: pip install onnxruntime scipy)",
}


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def install_hint(extra: str) -> str:
    return HINTS.get(extra, f"pip install '{DISTRIBUTION}[{extra}]'")


def needs(command: str, extra: str) -> str:
    """The one line printed when ``extra``'s modules are missing."""
    if extra in HINTS:
        return f"costmodel {command} needs {', '.join(EXTRAS[extra])}: {HINTS[extra]}"
    return f"costmodel {command} needs the {extra} extra: {install_hint(extra)}"
