"""Run one exported artifact with onnxruntime (no torch): encode a graph, score configs.

Sessions are created once and shared; ``InferenceSession.run`` is thread-safe and
releases the GIL, so callers may run it from worker threads concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from xla_costmodel.manifest import ArtifactError, GraphSpec, Manifest, read_manifest
from xla_costmodel.tpugraphs.arrays import Graph
from xla_costmodel.tpugraphs.collections import CollectionSpec

Embedding = dict[str, npt.NDArray[np.float32]]


@dataclass(frozen=True)
class SessionOptions:
    intra_op_threads: int = 1
    # Not a setting (it was COSTMODEL_INTER_OP_THREADS): ``_open`` runs the sessions
    # sequentially (ORT_SEQUENTIAL), where onnxruntime ignores the inter-op pool and
    # acts as if it were 1 (its API documentation), so no value here changes anything.
    inter_op_threads: int = 1


class ArtifactRunner:
    """An artifact's two ONNX sessions plus its manifest."""

    def __init__(
        self, artifact_dir: Path, options: SessionOptions | None = None
    ) -> None:
        self.path = artifact_dir
        self.manifest: Manifest = read_manifest(artifact_dir)
        opts = options or SessionOptions()
        self._encoder = self._open(self.manifest.encoder, opts)
        self._scorer = self._open(self.manifest.scorer, opts)
        self.config_name = self.manifest.config_input.name
        self.embedding_names = [s.name for s in self.manifest.encoder.outputs]
        # name -> declared dims: what a cached embedding is checked against
        self.embedding_shapes = {s.name: s.shape for s in self.manifest.encoder.outputs}

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def collection(self) -> str:
        return self.manifest.collection

    @property
    def spec(self) -> CollectionSpec:
        """What the model's collection declares (config key, width, per_node, ...)."""
        return self.manifest.spec

    def _open(self, spec: GraphSpec, opts: SessionOptions) -> ort.InferenceSession:
        so = ort.SessionOptions()
        so.intra_op_num_threads = opts.intra_op_threads
        so.inter_op_num_threads = opts.inter_op_threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        path = self.path / spec.file
        try:
            session = ort.InferenceSession(
                str(path), sess_options=so, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ArtifactError(f"{path}: onnxruntime cannot load it: {exc}") from None
        got_in = sorted(i.name for i in session.get_inputs())
        got_out = sorted(o.name for o in session.get_outputs())
        if got_in != sorted(s.name for s in spec.inputs) or got_out != sorted(
            s.name for s in spec.outputs
        ):
            raise ArtifactError(
                f"{path}: graph inputs {got_in}/outputs {got_out} do not match the manifest"
            )
        return session

    def encoder_feeds(self, graph: Graph) -> dict[str, np.ndarray]:
        feeds: dict[str, np.ndarray] = {
            "node_feat": graph.node_feat,
            "node_opcode": graph.node_opcode.astype(np.int64),
            "edge_index": graph.edge_index,
        }
        if self.spec.per_node:
            if graph.node_config_ids is None:
                raise ArtifactError(f"a {self.collection} model needs node_config_ids")
            feeds["node_config_ids"] = graph.node_config_ids
        return feeds

    def encode(self, graph: Graph) -> Embedding:
        outputs = self._encoder.run(self.embedding_names, self.encoder_feeds(graph))
        return {
            name: np.ascontiguousarray(value, dtype=np.float32)
            for name, value in zip(self.embedding_names, outputs, strict=True)
        }

    def score(
        self, embedding: Embedding, configs: npt.NDArray[np.float32]
    ) -> np.ndarray:
        feeds = {**embedding, self.config_name: configs}
        (scores,) = self._scorer.run(["scores"], feeds)
        return np.asarray(scores, dtype=np.float32).reshape(-1)
