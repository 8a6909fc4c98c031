"""Apply one config's options to exactly one XLA compile: ``compile_with``.

A ``CompilerOptions`` (``tpugraphs.xla_cpu2``) has two parts. Top-level DebugOptions
fields go through jax's public ``Lowered.compile(compiler_options=...)``. Entries of
the ``xla_backend_extra_options`` map (e.g. the loop-hoisting threshold) cannot:
jaxlib 0.10.2 refuses that field there ("is not a valid message value"), and
``XLA_FLAGS`` would change every compile in the process.

The route, chosen for robustness across jax versions:

- The map travels inside ``compiler_options`` as one entry,
  ``xla_backend_extra_options="k=v,k=v"`` (``CompilerOptions.flat``: XLA_FLAGS'
  spelling, keys sorted). So jax's
  in-memory executable cache, keyed by ``compiler_options``, keeps the config's
  executable apart from the default's: neither is ever handed the other's.
- One wrapper, installed once and a no-op for every compile without that entry,
  around ``jax._src.compiler.get_compile_options`` (re-exported publicly as
  ``jax.extend.backend.get_compile_options``; jax's lowering calls it as
  ``compiler.get_compile_options(..., env_options_overrides=compiler_options)``
  before the persistent cache key is computed). It takes the entry out of the
  overrides and appends the map entries to the serialized ``CompileOptionsProto``
  (``executable_build_options`` 3 -> ``debug_options`` 3 -> field 500, each entry
  ``{1: key, 2: value}``), which protobuf merges into the map.
- Merging: entries already in the proto (from ``XLA_FLAGS``) are kept; the same key
  with another value raises ``OptionConflict``: one option never silently
  overwrites another.
- If this jax lacks the hook (no such function, no ``env_options_overrides``, or no
  proto round trip on ``CompileOptions``), a config with map entries raises
  ``RouteUnavailable``: its options are outside this jaxlib's space
  (``compiler_space`` probes report them unsupported); top-level-only configs still
  compile through the public route.

Errors:

    CompileOptionsError       a config's options cannot be applied as asked
    ├── RouteUnavailable      this jax offers no per-compile route for the map
    └── OptionConflict        a map key is already set to another value
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from xla_costmodel.tpugraphs.xla_cpu import OptionValue
from xla_costmodel.tpugraphs.xla_cpu2 import EXTRA_KEY, CompilerOptions

_BUILD_OPTIONS: Final = 3  # CompileOptionsProto.executable_build_options
_DEBUG_OPTIONS: Final = 3  # ExecutableBuildOptionsProto.debug_options
_EXTRA_MAP: Final = 500  # DebugOptions.xla_backend_extra_options
_MARK: Final = "_xla_costmodel_extra_options_route"
_LOCK = threading.Lock()


class CompileOptionsError(Exception):
    """A config's options cannot be applied to a compile as asked."""


class RouteUnavailable(CompileOptionsError):
    """This jax has no per-compile route for ``xla_backend_extra_options``."""


class OptionConflict(CompileOptionsError):
    """A map key is already set (e.g. by XLA_FLAGS) to another value."""


def compile_with(lowered: Any, options: CompilerOptions) -> Any:
    """``lowered`` (a ``jax.stages.Lowered``) compiled under ``options`` only.

    Returns the ``jax.stages.Compiled``; XLA's own errors propagate (an unknown
    top-level option: "No such compile option"; a bad map value: "Failed to parse
    value"). An unknown map key is silently ignored by XLA: ``compiler_space``
    probes which keys this jaxlib knows.
    """
    return lowered.compile(compiler_options=jax_compiler_options(options))


def jax_compiler_options(options: CompilerOptions) -> dict[str, OptionValue]:
    """The ``compiler_options`` dict for ``Lowered.compile`` or ``jax.jit``:
    ``options.flat()``, after installing the route when the map has entries
    (RouteUnavailable if it cannot be), so the dict is only valid in this process."""
    if options.extra_options:
        install()
    return options.flat()


def install() -> None:
    """Wrap jax's ``get_compile_options`` once (idempotent, thread-safe)."""
    with _LOCK:
        try:
            from jax._src import compiler  # the one jax internal this module touches
        except ImportError as exc:
            raise RouteUnavailable(_unavailable(f"no module: {exc}")) from None
        original = getattr(compiler, "get_compile_options", None)
        if getattr(original, _MARK, False):
            return
        if original is None:
            raise RouteUnavailable(_unavailable("jax._src.compiler has none"))
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError) as exc:
            raise RouteUnavailable(_unavailable(f"no signature: {exc}")) from None
        if "env_options_overrides" not in signature.parameters:
            raise RouteUnavailable(_unavailable("it takes no env_options_overrides"))
        compiler.get_compile_options = _wrap(original, signature)


def with_extra_options(compile_options: Any, extra: Mapping[str, str]) -> Any:
    """A copy of an ``xla_client.CompileOptions`` with ``extra`` merged into the map.

    Keys already present keep their value; the same key with another value raises
    ``OptionConflict``.
    """
    cls = type(compile_options)
    if not hasattr(cls, "ParseFromString") or not hasattr(cls, "SerializeAsString"):
        raise RouteUnavailable(_unavailable(f"{cls.__name__} has no proto round trip"))
    raw: bytes = compile_options.SerializeAsString()
    present = read_extra_options(raw)
    clash = sorted(k for k, v in extra.items() if present.get(k, v) != v)
    if clash:
        held = ", ".join(f"{k}={present[k]} (asked {extra[k]})" for k in clash)
        raise OptionConflict(f"{EXTRA_KEY} already sets {held}, e.g. via XLA_FLAGS")
    added = b"".join(
        _extra_entry(k, v) for k, v in sorted(extra.items()) if k not in present
    )
    return cls.ParseFromString(raw + added) if added else compile_options


def read_extra_options(serialized: bytes) -> dict[str, str]:
    """The ``xla_backend_extra_options`` map of a serialized CompileOptionsProto."""
    out: dict[str, str] = {}
    for build in _submessages(serialized, _BUILD_OPTIONS):
        for debug in _submessages(build, _DEBUG_OPTIONS):
            for entry in _submessages(debug, _EXTRA_MAP):
                kv = dict(_fields(entry))
                key, value = kv.get(1, b""), kv.get(2, b"")
                if isinstance(key, bytes) and isinstance(value, bytes):
                    out[key.decode()] = (
                        value.decode()
                    )  # the last one wins, as in protobuf
    return out


def _wrap(original: Callable[..., Any], signature: inspect.Signature) -> Any:
    @functools.wraps(original)
    def get_compile_options(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        overrides = bound.arguments.get("env_options_overrides")
        if not overrides or EXTRA_KEY not in overrides:
            return original(*args, **kwargs)
        overrides = dict(overrides)
        spelled = overrides.pop(EXTRA_KEY)
        bound.arguments["env_options_overrides"] = overrides
        options = original(*bound.args, **bound.kwargs)
        extra = CompilerOptions.from_flat({EXTRA_KEY: spelled}).extra_options
        return with_extra_options(options, extra)

    setattr(get_compile_options, _MARK, True)
    return get_compile_options


def _unavailable(why: str) -> str:
    import jax

    return (
        f"jax {jax.__version__}: cannot set {EXTRA_KEY} per compile "
        f"(jax._src.compiler.get_compile_options: {why}); options in that map are "
        "outside this jaxlib's space"
    )


# protobuf wire format, just enough to read and append one map field


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


def _extra_entry(key: str, value: str) -> bytes:
    entry = _length_delimited(1, key.encode()) + _length_delimited(2, value.encode())
    debug = _length_delimited(_EXTRA_MAP, entry)
    return _length_delimited(_BUILD_OPTIONS, _length_delimited(_DEBUG_OPTIONS, debug))


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = buf[i : i + width], i + width
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, value


def _submessages(buf: bytes, number: int) -> Iterator[bytes]:
    for n, value in _fields(buf):
        if n == number and isinstance(value, bytes):
            yield value
