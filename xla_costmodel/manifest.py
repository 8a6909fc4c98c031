"""The artifact contract between ``models/`` (writes) and ``service/`` (reads).

An artifact is a directory ``<model_dir>/<name>/<version>/`` holding ``manifest.json``,
``encoder.onnx`` and ``scorer.onnx``. ``version`` is a positive integer (as in
Triton/TF-Serving model repositories), ASCII digits only; the newest is the largest.
A manifest names its files plainly (``FILE_NAME``), and each must resolve inside its
artifact directory: a manifest cannot point the service at ``../../etc`` or through a
symlink elsewhere.

The wiring rule the service relies on: the scorer's inputs are exactly the encoder's
outputs (same names, dtypes, shapes) plus one config input, the collection's config
key (``config_feat`` for tile and xla_cpu, ``node_config_feat`` for layout:
``xla_costmodel.tpugraphs.collections``); the scorer has one output, ``scores`` [num_configs],
lower = faster. The encoder's inputs are the raw TpuGraphs arrays (``node_opcode`` as
int64); normalisation happens inside the ONNX graphs.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from xla_costmodel.tpugraphs.collections import COLLECTIONS, CollectionSpec, get
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.spec import Collection

MANIFEST_FORMAT: Final = "costmodel-artifact/1"
MANIFEST_FILE = "manifest.json"
# The scorer's config input of each collection (its config key).
CONFIG_INPUT = {name: c.config_input for name, c in COLLECTIONS.items()}
# The hardware a model's training runtimes were measured on. Runtimes from different
# targets are never mixed (feedback, adaptation, export are all keyed by it).
TARGET_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$"
TPU_TARGET: Final = "tpu-v3"  # every TpuGraphs runtime was measured on a TPU v3
FILE_NAME: Final = r"^[A-Za-z0-9._-]+$"  # a file in the artifact directory itself
_VERSION = re.compile(r"[0-9]+")  # str.isdigit() takes superscripts, other scripts


class TensorSpec(BaseModel):
    """One ONNX input or output: symbolic dims are strings (``"num_nodes"``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    dtype: Literal["float32", "int64"]
    shape: list[int | str]


class GraphSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str = Field(pattern=FILE_NAME)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


class KnowledgeFile(BaseModel):
    """What the training data taught per target, shipped as numpy seeds of target
    knowledge (``xla_costmodel.tpugraphs.knowledge.save_seeds``): the service starts
    every target's knowledge from them, and other targets' at reduced trust."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(pattern=FILE_NAME)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    programs: dict[str, int] = Field(description="target -> programs it holds")
    # What the seeds were measured under: measurements of another compiler count
    # less in a target's knowledge (tpugraphs/knowledge.py); absent: unknown.
    compiler: dict[str, str] = Field(
        default_factory=dict,
        description="target -> the compiler build its seeds were measured under",
    )


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["costmodel-artifact/1"] = MANIFEST_FORMAT
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    collection: Collection
    version: str = Field(pattern=r"^[0-9]+$")
    target: str = Field(
        pattern=TARGET_PATTERN, description="hardware its runtimes were measured on"
    )
    created: str
    opset: int
    feature_dims: dict[str, int]
    encoder: GraphSpec
    scorer: GraphSpec
    training: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    targets: list[str] = Field(
        default_factory=list,
        description="every target its training runtimes came from (empty: [target])",
    )
    knowledge: KnowledgeFile | None = None

    def trained_on(self, target: str) -> bool:
        """Whether runtimes of ``target`` were among its training data: a model of
        other hardware only must not dominate a ranking for this one."""
        return target in (self.targets or [self.target])

    @property
    def spec(self) -> CollectionSpec:
        """What the model's collection declares."""
        return get(self.collection)

    @property
    def config_input(self) -> TensorSpec:
        name = self.spec.config_input
        return next(s for s in self.scorer.inputs if s.name == name)

    @property
    def embedding_specs(self) -> list[TensorSpec]:
        return list(self.encoder.outputs)


class ArtifactError(Exception):
    """An artifact directory that cannot be served: missing files, bad manifest, mismatch."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(artifact_dir: Path, verify_files: bool = True) -> Manifest:
    """Parse and check a manifest: schema, wiring rule, and (optionally) file hashes."""
    path = artifact_dir / MANIFEST_FILE
    try:
        manifest = Manifest.model_validate(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing") from None
    except (ValueError, OSError) as exc:
        raise ArtifactError(f"{path}: invalid manifest: {exc}") from None
    _check_wiring(manifest, path)
    files: list[GraphSpec | KnowledgeFile] = [manifest.encoder, manifest.scorer]
    if manifest.knowledge is not None:
        files.append(manifest.knowledge)
    for spec in files:
        _check_inside(artifact_dir, spec.file, path)
    if verify_files:
        for spec in files:
            onnx_path = artifact_dir / spec.file
            if not onnx_path.is_file():
                raise ArtifactError(f"{onnx_path}: missing")
            if sha256_file(onnx_path) != spec.sha256:
                raise ArtifactError(f"{onnx_path}: sha256 does not match the manifest")
    return manifest


def _check_inside(artifact_dir: Path, file: str, path: Path) -> None:
    """``file`` (a ``FILE_NAME``) names an entry of ``artifact_dir`` itself, after
    symlinks: not ``.`` or ``..``, nor a link out of it."""
    folder = artifact_dir.resolve()
    if file in {".", ".."} or (folder / file).resolve().parent != folder:
        raise ArtifactError(f"{path}: file {file!r} is not inside {artifact_dir}")


def _check_wiring(m: Manifest, path: Path) -> None:
    scorer_inputs = {s.name: s for s in m.scorer.inputs}
    for out in m.encoder.outputs:
        if scorer_inputs.get(out.name) != out:
            raise ArtifactError(
                f"{path}: scorer does not take encoder output {out.name!r}"
            )
    extra = set(scorer_inputs) - {o.name for o in m.encoder.outputs}
    if extra != {m.spec.config_input}:
        raise ArtifactError(
            f"{path}: scorer must take exactly one config input "
            f"{m.spec.config_input!r}, found {sorted(extra)}"
        )
    width = scorer_inputs[m.spec.config_input].shape[-1:]
    if width != [m.spec.width]:
        raise ArtifactError(
            f"{path}: config input {m.spec.config_input!r} ends in {width}, a "
            f"{m.collection} config row has {m.spec.width} values"
        )
    if [o.name for o in m.scorer.outputs] != ["scores"]:
        raise ArtifactError(f"{path}: scorer must have the single output 'scores'")


def write_manifest(artifact_dir: Path, manifest: Manifest) -> Path:
    path = artifact_dir / MANIFEST_FILE
    path.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    return path


def list_versions(model_dir: Path, name: str) -> list[str]:
    """Versions present for a model, oldest first (numeric order): folders named by
    ASCII digits alone."""
    root = model_dir / name
    if not root.is_dir():
        return []
    found = (p.name for p in root.iterdir() if is_version(p.name) and p.is_dir())
    return sorted(found, key=int)


def is_version(name: str) -> bool:
    """A version folder's name: ASCII digits (``int`` and ``isdigit`` take others)."""
    return _VERSION.fullmatch(name) is not None


# Re-exported so callers catch one error type for bad graph arrays.
__all__ = [
    "CONFIG_INPUT",
    "ArtifactError",
    "GraphFormatError",
    "GraphSpec",
    "KnowledgeFile",
    "Manifest",
    "TensorSpec",
    "is_version",
    "list_versions",
    "read_manifest",
    "sha256_file",
    "write_manifest",
]
