"""Fine-tuning: start from an exported artifact instead of from scratch.

``load_init`` rebuilds an artifact's network in PyTorch, with the architecture its
manifest records (``training.model_config``); ``finetune`` trains it on new files with
``xla_costmodel.models.train.fit`` (same loop, same flags) and exports a new version, with the same
name and ``target``, whose manifest's ``training.init`` names the artifact it began from.

Where the weights come from. The ONNX files are what is served (the manifest holds
their sha256), so they are the reference: weights from any source must reproduce the
artifact's encoder and scorer outputs under onnxruntime on a probe graph, or they are
refused. A stale checkpoint cannot slip through. Sources, the first that passes wins:

1. ``<artifact>/checkpoint.pt``, which ``costmodel train`` writes beside its artifact;
2. ``<repo>/checkpoints/<name>/<version>/checkpoint.pt`` for an artifact at
   ``<repo>/artifacts/<name>/<version>``, where ``make train`` puts the shipped ones;
3. the ONNX initializers themselves.

A checkpoint comes first because it holds the parameters as training defined them. The
ONNX fallback exists because a served artifact is often only manifest + ONNX (the
service's image ships no torch files, so export does not put the torch state in the
artifact either). Names alone do not recover the ONNX weights: the exporter folds some
parameters into unnamed constants (``xla_costmodel.models.onnx_weights`` undoes that, re-expressing
a folded ``NormLinear``: the same function, other parameters, so fine-tuning from it
takes slightly different steps than fine-tuning from the checkpoint would).
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from xla_costmodel.manifest import ArtifactError, Manifest, read_manifest
from xla_costmodel.models.checkpoint import CHECKPOINT, load_checkpoint, save_checkpoint
from xla_costmodel.models.export import export_artifact
from xla_costmodel.models.network import CostModel, ModelConfig
from xla_costmodel.models.onnx_weights import Unrecoverable, restore
from xla_costmodel.models.synthetic import make_arrays
from xla_costmodel.models.train import TrainConfig, fit, graph_tensors
from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.tpugraphs.arrays import Graph, make_graph

RTOL, ATOL = 1e-3, 1e-4  # as the export contract test; atol scales with the outputs


class InitError(ValueError):
    """An artifact that cannot start a fine-tune; the message is one line for the CLI."""


class _Rejected(Exception):
    """One weight source that does not reproduce the artifact (why, in one line)."""


@dataclass(frozen=True)
class InitArtifact:
    """An artifact and its network, rebuilt in PyTorch (``weights``: read from where)."""

    path: Path
    manifest: Manifest
    model: CostModel
    weights: str

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    def record(self) -> dict[str, Any]:
        """What the new manifest's ``training.init`` says about this starting point."""
        m = self.manifest
        return {
            "artifact": str(self.path),
            "name": m.name,
            "version": m.version,
            "sha256": {"encoder": m.encoder.sha256, "scorer": m.scorer.sha256},
            "target": m.target,
            "weights": self.weights,
            "feature_stats": "kept from the init artifact",
        }


def load_init(artifact_dir: Path, collection: str | None = None) -> InitArtifact:
    """Rebuild the network of the artifact at ``artifact_dir`` (see the module doc).

    Raises ``InitError`` when the directory is missing or not a valid artifact, when
    it is of another ``collection``, or when no weight source reproduces its ONNX files.
    """
    where = f"--init {artifact_dir}"
    if not artifact_dir.is_dir():
        raise InitError(f"{where}: no such artifact directory")
    try:
        manifest = read_manifest(artifact_dir)
        probe = _Probe.of(ArtifactRunner(artifact_dir))
    except ArtifactError as exc:
        raise InitError(f"{where}: {exc}") from None
    if collection is not None and manifest.collection != collection:
        raise InitError(f"{where} is a {manifest.collection} model, not {collection}")
    cfg = _model_config(manifest, where)
    reasons = []
    for source, rebuild in _sources(artifact_dir, manifest):
        try:
            model = rebuild(cfg, probe)
        except _Rejected as exc:
            reasons.append(f"{source}: {exc}")
            continue
        model.eval()
        return InitArtifact(artifact_dir, manifest, model, source)
    raise InitError(
        f"{where}: no weights reproduce its ONNX files ({'; '.join(reasons)})"
    )


def architecture(start: InitArtifact, **given: int | None) -> ModelConfig:
    """The artifact's architecture; a field given (not None) must agree with it."""
    clashes = [
        f"--{k} {v} (it has {getattr(start.config, k)})"
        for k, v in given.items()
        if v is not None and v != getattr(start.config, k)
    ]
    if clashes:
        raise InitError(
            f"--init {start.path} fixes the architecture; drop " + ", ".join(clashes)
        )
    return start.config


def finetune(
    init: InitArtifact | Path,
    train_paths: Sequence[Path],
    valid_paths: Sequence[Path],
    cfg: TrainConfig,
    out: Path,
    console: Console | None = None,
) -> Manifest:
    """Fine-tune the artifact ``init`` on ``train_paths`` and export it to ``out``.

    ``fit`` runs as for a fresh model (early stopping on ``valid_paths``, the starting
    network counting as epoch 0) but from the artifact's weights and statistics;
    ``cfg.model`` must be its architecture (``load_init(path).config``). ``out`` gets
    ``checkpoint.pt`` and the artifact: the init's name and target, ``training.init``
    naming the start, the version from ``out``'s name as for ``export_artifact``.
    """
    start = init if isinstance(init, InitArtifact) else load_init(init, cfg.collection)
    if start.manifest.collection != cfg.collection:
        raise InitError(
            f"--init {start.path} is a {start.manifest.collection} model, "
            f"not {cfg.collection}"
        )
    architecture(start, **cfg.model.to_dict())
    check_out(start, out)
    result = fit(train_paths, valid_paths, cfg, out, console, init=start.model)
    result.summary["init"] = start.record()
    save_checkpoint(result, out)
    return export_artifact(
        result, out, name=start.manifest.name, target=start.manifest.target
    )


def check_out(start: InitArtifact, out: Path) -> None:
    """Refuse to write the new version over the artifact it starts from."""
    if out.resolve() == start.path.resolve():
        raise InitError(
            f"--out {out} is the --init artifact; write the new version "
            "to another directory"
        )


def _model_config(manifest: Manifest, where: str) -> ModelConfig:
    raw = manifest.training.get("model_config")
    try:
        cfg = ModelConfig(**raw) if isinstance(raw, dict) else None
    except TypeError:
        cfg = None
    if cfg is None:
        raise InitError(
            f"{where}: its manifest has no usable training.model_config "
            f"(the architecture): {raw!r}"
        ) from None
    if cfg.collection != manifest.collection:
        raise InitError(f"{where}: training.model_config is for {cfg.collection}")
    return cfg


Rebuild = Callable[[ModelConfig, "_Probe"], CostModel]


def _sources(artifact_dir: Path, manifest: Manifest) -> list[tuple[str, Rebuild]]:
    found = [artifact_dir / CHECKPOINT]
    here = artifact_dir.resolve()
    if here.parent.parent.name == "artifacts":
        tree = here.parents[2] / "checkpoints" / here.parent.name / here.name
        # Named as the user named the artifact: no machine paths in manifests.
        shown = tree if artifact_dir.is_absolute() else Path(os.path.relpath(tree))
        found.append(shown / CHECKPOINT)
    sources: list[tuple[str, Rebuild]] = [
        (str(p), partial(_from_checkpoint, p)) for p in found if p.is_file()
    ]
    sources.append(("onnx initializers", partial(_from_onnx, artifact_dir, manifest)))
    return sources


def _from_checkpoint(path: Path, cfg: ModelConfig, probe: _Probe) -> CostModel:
    try:
        model = load_checkpoint(path).model
    except (OSError, RuntimeError, KeyError, TypeError, pickle.UnpicklingError) as exc:
        raise _Rejected(f"unreadable ({type(exc).__name__})") from None
    if model.cfg != cfg:
        raise _Rejected(f"architecture {model.cfg.to_dict()} is not the manifest's")
    gap = probe.encoder_gap(model) or probe.scorer_gap(model)
    if gap:
        raise _Rejected(f"{gap}: not this artifact's weights")
    return model


def _from_onnx(
    artifact_dir: Path, manifest: Manifest, cfg: ModelConfig, probe: _Probe
) -> CostModel:
    model = CostModel(cfg)
    try:
        restore(
            model.encoder,
            artifact_dir / manifest.encoder.file,
            lambda: probe.encoder_gap(model),
        )
        restore(
            model.scorer,
            artifact_dir / manifest.scorer.file,
            lambda: probe.scorer_gap(model),
        )
    except Unrecoverable as exc:
        raise _Rejected(str(exc)) from None
    return model


@dataclass
class _Probe:
    """A synthetic graph, configs and the artifact's own outputs on them (onnxruntime)."""

    runner: ArtifactRunner
    graph: Graph
    configs: np.ndarray
    embedding: Embedding

    @classmethod
    def of(cls, runner: ArtifactRunner) -> _Probe:
        rng = np.random.default_rng(0)
        spec = runner.spec
        # Per-node configs are [C,NC,18] each: fewer of them; their values are
        # dims and -1 (normal noise), one-row configs sizes or codes (positive).
        size = 16 if spec.per_node else 32
        arrays = make_arrays(spec.name, num_nodes=40, num_configs=size, seed=0)
        configs = _floats(arrays, spec.config_key)
        if spec.per_node:
            configs += rng.normal(0, 1, configs.shape)
        else:
            configs += rng.uniform(0, 4, configs.shape)
        # Noise on every feature, negative ones too: every column and code path counts.
        feat = _floats(arrays, "node_feat")
        feat += rng.normal(0, 3, feat.shape)
        graph = make_graph(
            feat.astype(np.float32),
            arrays["node_opcode"],
            arrays["edge_index"],
            arrays.get("node_config_ids"),
        )
        configs = configs.astype(np.float32)
        return cls(runner, graph, configs, runner.encode(graph))

    def encoder_gap(self, model: CostModel) -> str | None:
        with torch.no_grad():
            got = model.encode(graph_tensors(self.graph))
        for name, have in zip(self.runner.embedding_names, got, strict=True):
            if gap := _gap(
                f"encoder output {name}", have.numpy(), self.embedding[name]
            ):
                return gap
        return None

    def scorer_gap(self, model: CostModel) -> str | None:
        emb = [torch.from_numpy(self.embedding[n]) for n in self.runner.embedding_names]
        with torch.no_grad():
            have = model.scorer(*emb, torch.from_numpy(self.configs)).numpy()
        return _gap("scores", have, self.runner.score(self.embedding, self.configs))


def _gap(what: str, have: np.ndarray, want: np.ndarray) -> str | None:
    atol = ATOL * (1.0 + float(np.abs(want).max(initial=0.0)))
    if have.shape == want.shape and np.allclose(have, want, rtol=RTOL, atol=atol):
        return None
    diff = np.abs(have - want).max() if have.shape == want.shape else math.inf
    return f"{what} differ from onnxruntime's (max |diff| {diff:.3g})"


def _floats(arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    return np.array(arrays[key], dtype=np.float64)
